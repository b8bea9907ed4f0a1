// The page: model choice, the conversation, streaming, stop and tokens/s. The model runs in a
// Web Worker (worker.js); a stop sets a flag in shared memory the worker reads per token.
const $ = (id) => document.getElementById(id);
const worker = new Worker("worker.js", { type: "module" });
const stop = self.crossOriginIsolated ? new SharedArrayBuffer(4) : null;
let current = null;

function status(text) {
  $("status").textContent = text;
}

function busy(on) {
  $("send").disabled = on;
  $("reset").disabled = on;
  $("load").disabled = on;
  $("stop").disabled = !on;
}

function say(role, text) {
  const div = document.createElement("div");
  div.className = role;
  div.textContent = text;
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

worker.onmessage = (e) => {
  const m = e.data;
  if (m.type === "progress") {
    status(`loading… ${(m.received / 2 ** 20).toFixed(1)} of ${(m.total / 2 ** 20).toFixed(1)} MiB`);
  } else if (m.type === "loaded") {
    const threads = m.kernels === "WebGPU" ? "GPU" : `${m.threads} thread${m.threads === 1 ? "" : "s"}`;
    const what = `${m.architecture}, ${m.nVocab} tokens, ${threads} (${m.kernels})`;
    status(`${what}, loaded in ${(m.ms / 1000).toFixed(1)} s`);
    document.body.dataset.state = "loaded";
    busy(false);
  } else if (m.type === "piece") {
    current.textContent += m.piece;
    $("log").scrollTop = $("log").scrollHeight;
  } else if (m.type === "done") {
    const n = m.result.completionTokens;
    const tps = n / (m.ms / 1000);
    $("speed").textContent = `${n} tokens, ${tps.toFixed(1)} tokens/s (${m.result.finishReason})`;
    current.dataset.done = "1";
    document.body.dataset.state = "done";
    document.body.dataset.tps = tps.toFixed(2);
    busy(false);
  } else if (m.type === "error") {
    status(`error: ${m.message}`);
    document.body.dataset.state = "error";
    busy(false);
  }
};

$("load").onclick = () => {
  const file = $("file").files[0];
  const url = $("url").value.trim();
  if (!file && !url) return status("pick a .gguf file or give a URL");
  busy(true);
  $("stop").disabled = true;
  status("loading…");
  const src = file ? { file } : { url };
  worker.postMessage({ type: "load", ...src, stop, threads, device });
};

$("send").onclick = () => {
  const prompt = $("prompt").value;
  if (!prompt) return;
  say("user", prompt);
  current = say("assistant", "");
  $("prompt").value = "";
  document.body.dataset.state = "generating";
  busy(true);
  worker.postMessage({
    type: "generate",
    prompt,
    raw: $("raw").checked,
    opts: { temperature: Number($("temp").value), maxTokens: Number($("max").value) },
  });
};

$("stop").onclick = () => {
  if (stop) Atomics.store(new Int32Array(stop), 0, 1);
};

$("reset").onclick = () => {
  $("log").textContent = "";
  worker.postMessage({ type: "reset" });
};

// ?model=URL loads it at once (links and the browser test); ?threads=N sets the kernels'
// threads (default: the cores; 1 runs the one-thread build, as does a page that is not
// cross-origin isolated); ?device=gpu runs the model on WebGPU
const params = new URLSearchParams(location.search);
const threads = Number(params.get("threads")) || navigator.hardwareConcurrency || 1;
const device = params.get("device") === "gpu" ? "gpu" : "cpu";
if (params.get("model")) {
  $("url").value = params.get("model");
  $("load").click();
}
