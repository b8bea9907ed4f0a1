// The greedy raw completion of PROMPT (N tokens at most) printed to stdout, as
// `cera run -m MODEL --raw --temp 0 -n N -p PROMPT` prints it.
//
//   node crates/cera-wasm/examples/node/generate.mjs MODEL.gguf PROMPT N
//
// (build the package first: scripts/build-wasm.sh)
import { readFileSync } from "node:fs";
import { initSync, Engine } from "../../pkg/cera.js";

const [model, prompt, n] = process.argv.slice(2);
if (!model || prompt === undefined || !n || !(Number(n) > 0)) {
  console.error("usage: generate.mjs MODEL.gguf PROMPT N");
  process.exit(2);
}
initSync({ module: readFileSync(new URL("../../pkg/cera_bg.wasm", import.meta.url)) });
const engine = Engine.fromBytes(readFileSync(model));
const session = engine.session({});
const r = session.generate(prompt, { maxTokens: Number(n), temperature: 0 }, (piece) => {
  process.stdout.write(piece);
});
console.error(`\ncera-wasm: ${r.tokens.length} tokens, finish: ${r.finishReason}`);
