// A tiny static server for the page, on loopback: crates/cera-wasm/ (the page under /web/, the
// package under /pkg/) plus, under /models/, the GGUF files of a folder given as the second
// argument. It sends COOP/COEP so the page is cross-origin isolated (SharedArrayBuffer, for the
// stop button and, later, threads).
//
//   node crates/cera-wasm/web/serve.mjs [PORT] [MODELS_DIR]   then open http://127.0.0.1:PORT/web/
import { createServer } from "node:http";
import { createReadStream, statSync } from "node:fs";
import { extname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(new URL("..", import.meta.url)));
const port = Number(process.argv[2] || 8080);
const models = process.argv[3] ? resolve(process.argv[3]) : null;
const types = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".wasm": "application/wasm",
  ".json": "application/json",
  ".gguf": "application/octet-stream",
  ".ts": "text/plain; charset=utf-8",
};

const server = createServer((req, res) => {
  const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
  let file;
  if (path.startsWith("/models/") && models) {
    file = join(models, normalize(path.slice("/models/".length)));
    if (!file.startsWith(models + "/")) file = null;
  } else {
    file = join(root, normalize(path === "/" ? "/web/index.html" : path));
    if (file.endsWith("/")) file += "index.html";
    if (!file.startsWith(root + "/")) file = null;
  }
  let st = null;
  try {
    st = file && statSync(file);
  } catch {}
  if (st && st.isDirectory()) {
    file = join(file, "index.html");
    try {
      st = statSync(file);
    } catch {
      st = null;
    }
  }
  const headers = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
  };
  if (!st || !st.isFile()) {
    res.writeHead(404, { ...headers, "Content-Type": "text/plain" });
    return res.end("not found\n");
  }
  res.writeHead(200, {
    ...headers,
    "Content-Type": types[extname(file)] || "application/octet-stream",
    "Content-Length": st.size,
  });
  createReadStream(file).pipe(res);
});
server.listen(port, "127.0.0.1", () => {
  console.log(`cera-wasm page: http://127.0.0.1:${server.address().port}/web/`);
});
