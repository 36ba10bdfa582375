// The README's quickstart: `node quickstart.mjs BASE_URL API_KEY`.
import { htmClient } from "htm-client";

const [baseUrl, key] = process.argv.slice(2);
const htm = htmClient(baseUrl, { key });
const robot = { path: { robot: "my-agent" } };
const added = await htm.POST("/v1/robots/{robot}/memories", {
  params: robot,
  body: { content: "Staging runs PostgreSQL 18." },
});
console.log(added.data.key, added.data.working_memory.admitted); // a made-up key, true
const found = await htm.POST("/v1/robots/{robot}/recall", {
  params: robot,
  body: { query: "Which PostgreSQL runs on staging?" },
});
for (const hit of found.data.hits) console.log(hit.key, hit.score.toFixed(2), hit.content);
