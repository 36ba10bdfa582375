// add → recall → context → stats → replace → versions → tags → restore → forget through a client generated from openapi/openapi.json
// (openapi-typescript types + openapi-fetch). Type-checked with tsc --strict, so a spec change
// that breaks clients breaks the build; run with node against a live server.
import createClient from "openapi-fetch";
import type { paths } from "./schema.js";

declare const process: { argv: string[]; exit(code: number): never };

const [baseUrl, apiKey] = process.argv.slice(2);
const client = createClient<paths>({
  baseUrl,
  headers: { Authorization: `Bearer ${apiKey}` },
});

function check(condition: boolean, message: string): void {
  if (!condition) {
    console.error(`FAILED: ${message}`);
    process.exit(1);
  }
}

const robot = { path: { robot: "ts-agent" } };

const added = await client.POST("/v1/robots/{robot}/memories", {
  params: robot,
  body: { content: "The TypeScript client talks to HTM.", key: "ts-fact", importance: 7, tags: ["ts"] },
});
check(added.response.status === 201, `add status ${added.response.status}`);
check(added.data?.key === "ts-fact", "add returns the key");
check(added.data?.working_memory.admitted === true, "add is admitted to working memory");

const duplicate = await client.POST("/v1/robots/{robot}/memories", {
  params: robot,
  body: { content: "The TypeScript client talks to HTM.", dedupe: "exact" },
});
check(duplicate.response.status === 200, `duplicate add status ${duplicate.response.status}`);
check(duplicate.data?.duplicate_of === "ts-fact", "a duplicate names the memory it duplicates");

const recalled = await client.POST("/v1/robots/{robot}/recall", {
  params: robot,
  body: { query: "Which client talks to HTM?", strategy: "fulltext", limit: 5 },
});
check(recalled.response.status === 200, `recall status ${recalled.response.status}`);
check(recalled.data?.hits[0]?.key === "ts-fact", "recall finds the memory first");

const context = await client.GET("/v1/robots/{robot}/context", {
  params: { ...robot, query: { strategy: "important", max_tokens: 100 } },
});
check(context.response.status === 200, `context status ${context.response.status}`);
check(context.data?.text === "The TypeScript client talks to HTM.", "context text");

const stats = await client.GET("/v1/robots/{robot}/stats", { params: robot });
check(stats.response.status === 200, `stats status ${stats.response.status}`);
check(stats.data?.long_term.memories === 1, "stats count one memory");

const key = { path: { robot: "ts-agent", key: "ts-fact" } };
const replaced = await client.PUT("/v1/robots/{robot}/memories/{key}", {
  params: key,
  body: { content: "The TypeScript client still talks to HTM.", tags: ["clients:ts"] },
});
check(replaced.response.status === 200 && replaced.data?.version === 2, "replace is version 2");
const history = await client.GET("/v1/robots/{robot}/memories/{key}/versions", { params: key });
check(
  JSON.stringify(history.data?.versions.map((v) => [v.version, v.current])) === "[[2,true],[1,false]]",
  "versions newest first",
);
const tree = await client.GET("/v1/tags", {});
check(
  tree.data?.tags[0]?.path === "clients" && tree.data?.tags[0]?.children[0]?.path === "clients:ts",
  "tag tree",
);
const restored = await client.POST("/v1/robots/{robot}/memories/{key}/versions/{version}/restore", {
  params: { path: { robot: "ts-agent", key: "ts-fact", version: 1 } },
});
check(restored.data?.version === 3, "restore is version 3");
check(restored.data?.content === "The TypeScript client talks to HTM.", "restored content");

const forgotten = await client.DELETE("/v1/robots/{robot}/memories/{key}", {
  params: { path: { robot: "ts-agent", key: "ts-fact" } },
});
check(forgotten.response.status === 200, `forget status ${forgotten.response.status}`);
const gone = await client.GET("/v1/robots/{robot}/memories/{key}", {
  params: { path: { robot: "ts-agent", key: "ts-fact" } },
});
check(gone.response.status === 404, "forgotten memory is 404");
check(gone.error?.status === 404 && typeof gone.error?.detail === "string", "problem+json body");

const group = await client.PUT("/v1/groups/{group}", {
  params: { path: { group: "ts-desk" } },
  body: { members: ["ts-standby", "ts-active"] },
});
check(group.response.status === 200, `group status ${group.response.status}`);
check(JSON.stringify(group.data?.members) === '["ts-active","ts-standby"]', "group members by name");

console.log(JSON.stringify({ ok: true, hits: recalled.data?.hits.length, tokens: context.data?.tokens }));
