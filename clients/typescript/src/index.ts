// The HTM memory service's client: openapi-fetch, typed by the paths generated from the
// service's OpenAPI spec (src/schema.d.ts, `npm run generate`). Every route is
// client.GET/POST/PUT/PATCH/DELETE("/v1/...", { params, body }) with checked types.
import createClient from "openapi-fetch";
import type { paths } from "./schema.js";

export type { components, paths } from "./schema.js";

/** A client for `baseUrl`; `key` is an API key (auth on), `namespace` the namespace (auth off). */
export function htmClient(baseUrl: string, options: { key?: string; namespace?: string } = {}) {
  const headers: Record<string, string> = {};
  if (options.key) headers.Authorization = `Bearer ${options.key}`;
  if (options.namespace) headers["X-Namespace"] = options.namespace;
  return createClient<paths>({ baseUrl, headers });
}
