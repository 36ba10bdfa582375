// A short agent loop over the service: `node agent_loop.js BASE_URL API_KEY ROBOT` (after
// tsc --strict). Each message of a small conversation is remembered (a statement) or
// answered from what the robot recalls (a question; no model here: the answer is the best
// hit), then the robot's working memory is read back as prompt context. CI compiles it
// against the packed tarball installed in a clean project and runs it
// (tests/clients/test_packages.py); agent_loop.py is the same in Python.
import { htmClient } from "htm-client";

declare const process: { argv: string[] }; // node's, without @types/node

const conversation = [
  "The staging database runs PostgreSQL 18.",
  "Deploys happen on Fridays after the backup.",
  "When do deploys happen?",
  "Which database runs staging?",
];

const [baseUrl, key, name] = process.argv.slice(2);
const htm = htmClient(baseUrl, { key });
const robot = { path: { robot: name } };
for (const message of conversation) {
  if (!message.endsWith("?")) {
    const added = await htm.POST("/v1/robots/{robot}/memories", {
      params: robot,
      body: { content: message },
    });
    if (!added.data) throw new Error(`remember: ${added.response.status}`);
    const held = added.data.working_memory.admitted ? "and holding" : "(not held)";
    console.log(`remembered ${held}: ${message}`);
    continue;
  }
  const found = await htm.POST("/v1/robots/{robot}/recall", {
    params: robot,
    body: { query: message, limit: 1, strategy: "fulltext" },
  });
  if (!found.data) throw new Error(`recall: ${found.response.status}`);
  console.log(`${message} → ${found.data.hits[0]?.content ?? "I do not know."}`);
}
const context = await htm.GET("/v1/robots/{robot}/context", { params: robot });
if (!context.data) throw new Error(`context: ${context.response.status}`);
console.log(`context: ${context.data.items.length} items, ${context.data.tokens} tokens`);
