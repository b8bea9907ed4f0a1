// The Kotlin bindings as an app uses them (run by scripts/kotlin-test.sh with `kotlinc -script`
// against the generated bindings compiled into a jar): a greedy reply streamed through a Flow
// equals the CLI's, the blocking, callback and suspend forms agree, errors are typed, chat
// tools and JSON Schema work, cancel returns promptly and checkpoints restore, and the GPU
// device generates what the CPU does.
//
// Arguments: MODEL TOOL_MODEL PROMPT N CLI_TEXT_FILE PARITY_OUT CLI_GPU_TEXT_FILE MMPROJ IMAGE
// CLI_IMAGE_TEXT_FILE CLIP CLI_AUDIO_TEXT_FILE SPEECH CLI_SPEECH_TEXT CLI_SPEECH_SRT (TOOL_MODEL: one trained for tool calls, Qwen2.5 here; the CLI's greedy
// text of PROMPT on MODEL; where to write this run's tokens for the parity check; the CLI's 16
// greedy tokens of text with `--device gpu`; a vision projector for MODEL, an image, and the
// CLI's 12 greedy tokens after that image and "Describe the image.").

import dev.cera.*
import java.io.File
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking

val (model, toolModel, prompt, nArg, cliFile) = args
val parityOut = args[5]
val cliGpuText = File(args[6]).readText()
val n = nArg.toUInt()
var failures = 0

fun check(what: String, ok: Boolean, detail: () -> String = { "" }) {
    if (ok) println("ok   $what") else { failures++; println("FAIL $what ${detail()}") }
}

val engine = Engine(model, 2u)
val greedy = GenerateConfig(maxTokens = n, temperature = 0f)
val cliText = File(cliFile).readText()

// streaming through a Flow equals the CLI's greedy text
val pieces = runBlocking { engine.session(SessionConfig(nCtx = 512u)).generateFlow(prompt, greedy).toList() }
val streamed = pieces.joinToString("")
check("streamed in pieces", pieces.size > 10) { "got ${pieces.size}" }
check("stream equals the CLI", streamed == cliText || streamed == cliText.trimEnd('\n')) {
    "\n  cli:    ${cliText.trim()}\n  kotlin: $streamed"
}

// blocking, listener and suspend forms give the same text; the session kept its context
val s = engine.session(SessionConfig(nCtx = 512u))
val g = s.generate(prompt, greedy)
check("blocking equals stream", g.text == streamed)
check("finish reason", g.finishReason == "length") { g.finishReason }
check("one token per step", g.tokens.size == n.toInt()) { "${g.tokens.size}" }
check("context is prompt + reply", s.tokens() == engine.tokenize(prompt) + g.tokens)
// several prompts at once, in shared batched steps: each gets what it gets alone
val batch = engine.generateBatch(listOf(prompt, "The capital of France is"), greedy, SessionConfig(nCtx = 512u))
check("batch: the first prompt's text", batch.size == 2 && batch[0].text == streamed) { "${batch.map { it.text }}" }
val second = engine.session(SessionConfig(nCtx = 512u)).generate("The capital of France is", greedy)
check("batch: the second prompt's text", batch[1].text == second.text && batch[1].tokens == second.tokens)
val heard = StringBuilder()
val viaListener = engine.session(SessionConfig(nCtx = 512u)).generateWith(prompt, greedy, object : TokenListener {
    override fun onText(text: String): Boolean { heard.append(text); return true }
})
check("listener hears every piece", heard.toString() == streamed && viaListener.text == streamed)
val viaSuspend = runBlocking { engine.session(SessionConfig(nCtx = 512u)).generateAsync(prompt, greedy) }
check("suspend equals blocking", viaSuspend.text == streamed && viaSuspend.tokens == g.tokens)
val viaNext = runBlocking {
    val st = engine.session(SessionConfig(nCtx = 512u)).stream(prompt, greedy)
    val sb = StringBuilder()
    while (true) { sb.append(st.next() ?: break) }
    check("stream finish reason", st.finishReason() == "length") { "${st.finishReason()}" }
    st.destroy()
    sb.toString()
}
check("suspend next() equals blocking", viaNext == streamed)
File(parityOut).writeText(g.tokens.joinToString(" ") + "\n" + g.text + "\n")

// the device: `auto` (the default) takes a hardware GPU, else the CPU saying why; `gpu` runs
// the GPU backend (lavapipe here) and gives the CLI's greedy text on the GPU
check("auto says where it runs", engine.backend() == "CPU" && engine.deviceFallback() != null ||
    engine.backend() != "CPU" && engine.deviceFallback() == null) { "${engine.backend()} ${engine.deviceFallback()}" }
val gpu = Engine(model, 2u, "gpu")
check("gpu device is the GPU backend", gpu.backend() == "Vulkan" && gpu.device().startsWith("GPU: ")) {
    "${gpu.backend()}: ${gpu.device()}"
}
val onGpu = gpu.session(SessionConfig(nCtx = 512u)).generate(prompt, GenerateConfig(maxTokens = 16u, temperature = 0f))
check("gpu equals the CLI on the GPU", onGpu.text == cliGpuText || onGpu.text == cliGpuText.trimEnd('\n')) {
    "\n  cli:    ${cliGpuText.trim()}\n  kotlin: ${onGpu.text}"
}
gpu.destroy()
try {
    Engine(model, 2u, "tpu")
    check("unknown device throws", false)
} catch (e: CeraException.InvalidArgument) {
    check("unknown device is InvalidArgument", e.message!!.contains("cpu, gpu, auto")) { e.message!! }
}

// typed errors carrying the core's message
try {
    Engine("/nonexistent/missing.gguf", null)
    check("missing model throws", false)
} catch (e: CeraException.ModelLoad) {
    check("missing model is ModelLoad", e.message!!.contains("missing.gguf")) { e.message!! }
}
try {
    engine.session(SessionConfig(nCtx = 16u)).generate("word ".repeat(40), GenerateConfig(maxTokens = 4u))
    check("overflow throws", false)
} catch (e: CeraException.ContextOverflow) {
    check("overflow is ContextOverflow", e.message!!.contains("context")) { e.message!! }
}
try {
    s.generate("x", GenerateConfig(topP = 2f))
    check("top_p out of range throws", false)
} catch (e: CeraException.InvalidArgument) {
    check("top_p out of range is InvalidArgument", e.message!!.contains("top_p"))
}

// cancel from another thread returns within a token or so
val long = engine.session(SessionConfig(nCtx = 2048u))
val t0 = System.nanoTime()
val canceller = Thread { Thread.sleep(300); long.cancel() }
canceller.start()
val cancelled = try {
    long.generate(prompt, GenerateConfig(maxTokens = 1500u, temperature = 0f)).finishReason
} catch (e: CeraException.Cancelled) { "cancelled" }
val ms = (System.nanoTime() - t0) / 1_000_000
canceller.join()
check("cancel stops the generation", cancelled == "cancelled" && ms < 2000) { "$cancelled after $ms ms" }

// checkpoints: restore and continue as before
val cp = engine.session(SessionConfig(nCtx = 512u))
cp.generate(prompt, GenerateConfig(maxTokens = 8u, temperature = 0f))
val saved = cp.checkpoint()
val first = cp.generate(" and", GenerateConfig(maxTokens = 8u, temperature = 0f)).text
cp.restore(saved)
check("restore continues identically", cp.generate(" and", GenerateConfig(maxTokens = 8u, temperature = 0f)).text == first)

// chat: a JSON-Schema-constrained reply that validates, and a tool call parsed
val schema = """{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}"""
val chat = engine.chat(SessionConfig(nCtx = 2048u))
chat.ingest("user", "Describe a person as JSON with a name and an age.")
val jsonText = runBlocking {
    chat.stream(TurnConfig(GenerateConfig(maxTokens = 96u, temperature = 0f), jsonSchema = schema)).asFlow().toList().joinToString("")
}
check("JSON reply validates", schemaAccepts(schema, jsonText)) { jsonText }
val tools = listOf(ToolSpec("get_weather", "Weather for a city",
    """{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"""))
val tc = Engine(toolModel, 2u).chat(SessionConfig(nCtx = 2048u))
tc.setTools(tools)
tc.ingest("user", "What is the weather in Paris?")
val turn = tc.complete(TurnConfig(GenerateConfig(maxTokens = 64u, temperature = 0f), toolChoice = "required"))
check("tool call parsed", turn.toolCalls.size == 1 && turn.toolCalls[0].name == "get_weather"
    && schemaAccepts("""{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}""", turn.toolCalls[0].argumentsJson)) { turn.toString() }
if (turn.toolCalls.isEmpty()) kotlin.system.exitProcess(1)
tc.ingestToolResult(turn.toolCalls[0].id, "18 C and sunny")
val events = runBlocking { tc.completeFlow(TurnConfig(GenerateConfig(maxTokens = 32u, temperature = 0f))).toList() }
val done = events.last() as? ChatEvent.Done
check("reply after the tool result", done != null && done.turn.text.isNotEmpty() && done.turn.reusedTokens > 0u) { events.toString() }

// an image through the vision projector: the same reply as the CLI with the same image
val mm = engine.loadMmproj(args[7])
val vs = engine.session(SessionConfig(nCtx = 1024u))
val took = vs.appendImage(mm, File(args[8]).readBytes())
check("an image takes its rows and markers", took > 234u) { "$took" }
val vg = vs.generate("Describe the image.", GenerateConfig(maxTokens = 12u, temperature = 0f))
val cliImage = File(args[9]).readText()
check("after an image: the CLI's reply", vg.text == cliImage || vg.text == cliImage.trimEnd('\n')) {
    "\n  cli:    ${cliImage.trim()}\n  kotlin: ${vg.text}"
}
val badImage = try {
    vs.appendImage(mm, "hello".toByteArray()); "no error"
} catch (e: CeraException.InvalidArgument) { e.message ?: "" }
check("a bad image is an InvalidArgument naming it", badImage.contains("not an image")) { badImage }

// an audio clip through the same mmproj's audio half: the CLI's reply with the same clip
val au = engine.session(SessionConfig(nCtx = 1024u))
val clipRows = au.appendAudio(mm, File(args[10]).readBytes())
// 0.5 s: 51 frames of 10 ms, 7 positions after the encoder's 8x
check("a clip takes its rows", clipRows == 7u) { "$clipRows" }
val ag = au.generate("Transcribe.", GenerateConfig(maxTokens = 12u, temperature = 0f))
val cliAudio = File(args[11]).readText()
check("after a clip: the CLI's reply", ag.text == cliAudio || ag.text == cliAudio.trimEnd('\n')) {
    "\n  cli:    ${cliAudio.trim()}\n  kotlin: ${ag.text}"
}
val badAudio = try {
    au.appendAudio(mm, "RIFF\u0000\u0000\u0000\u0000WAVEfmt ".toByteArray()); "no error"
} catch (e: CeraException.InvalidArgument) { e.message ?: "" }
check("a bad clip is an InvalidArgument naming it", badAudio.startsWith("audio:")) { badAudio }

// speech to text: the catalog's Whisper tiny.en on whisper.cpp's jfk.wav, as `cera transcribe`
// prints it (text and SRT), from the file's bytes and from its samples
val whisper = Whisper("whisper-tiny.en", 2u)
val jfk = File(args[12]).readBytes()
val tr = whisper.transcribe(jfk, TranscribeConfig())
val cliSpeech = File(args[13]).readText().trim()
check("transcribe equals the CLI", tr.text == cliSpeech) { "\n  cli:    $cliSpeech\n  kotlin: ${tr.text}" }
check("segments with times", tr.segments.size >= 2 && tr.segments[0].start == 0f && tr.language == "en") { "$tr" }
check("srt equals the CLI", whisper.transcribeAs(jfk, TranscribeConfig(), "srt") == File(args[14]).readText())
// the 16-bit PCM of the `data` chunk (after fmt and LIST chunks), as floats
val at = (12 until jfk.size - 8).first { String(jfk, it, 4) == "data" } + 8
val pcm = FloatArray((jfk.size - at) / 2) { i ->
    ((jfk[at + 2 * i].toInt() and 0xff) or (jfk[at + 1 + 2 * i].toInt() shl 8)).toShort() / 32768f
}.toList()
check("samples transcribe as the file", whisper.transcribePcm(pcm, TranscribeConfig()).text == tr.text)
check("English-only: translation refused", try {
    whisper.transcribe(jfk, TranscribeConfig(translate = true)); false
} catch (e: CeraException) { e.message?.contains("English-only") == true })
check("bad audio: an error", try {
    whisper.transcribe("not audio".toByteArray(), TranscribeConfig()); false
} catch (e: CeraException.InvalidArgument) { true })

println(if (failures == 0) "all Kotlin checks passed" else "$failures Kotlin checks failed")
if (failures != 0) kotlin.system.exitProcess(1)
