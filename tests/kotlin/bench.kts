// Decode speed through the Kotlin bindings against `cera run`, interleaved (the Kotlin
// counterpart of scripts/bench-bindings.py, run by scripts/bench-bindings.sh): per round the
// CLI's own decode tok/s, `Session.generate` (the whole call minus a 1-token call's time) and
// a `Flow` (first piece to last).
//
// Arguments: CERA_BIN MODEL N ROUNDS THREADS

import dev.cera.*
import kotlinx.coroutines.flow.collect
import kotlinx.coroutines.runBlocking

val (ceraBin, model, nArg, roundsArg, threadsArg) = args
val n = nArg.toUInt()
val rounds = roundsArg.toInt()
val threads = threadsArg.toUInt()
val prompt = "Once upon a time"
val engine = Engine(model, threads)
val greedy = { k: UInt -> GenerateConfig(maxTokens = k, temperature = 0f) }
fun fresh() = engine.session(SessionConfig(nCtx = n + 64u))

fun cli(): Double {
    val p = ProcessBuilder(ceraBin, "run", "-m", model, "--raw", "--temp", "0", "-n", "$n", "--ignore-eos",
        "-t", "$threads", "-p", prompt).redirectOutput(ProcessBuilder.Redirect.DISCARD).start()
    val err = p.errorStream.bufferedReader().readText()
    check(p.waitFor() == 0) { err }
    val m = Regex("generated (\\d+) tokens in ([\\d.]+) ms").find(err)!!
    return m.groupValues[1].toDouble() / (m.groupValues[2].toDouble() / 1000)
}

fun whole(): Double {
    var t = System.nanoTime()
    fresh().generate(prompt, greedy(1u))
    val first = System.nanoTime() - t
    t = System.nanoTime()
    val g = fresh().generate(prompt, greedy(n))
    return (g.tokens.size - 1) / ((System.nanoTime() - t - first) / 1e9)
}

fun flowed(): Double = runBlocking {
    var t0 = 0L
    var pieces = 0
    val s = fresh()
    s.generateFlow(prompt, greedy(n)).collect { if (pieces++ == 0) t0 = System.nanoTime() }
    val dt = (System.nanoTime() - t0) / 1e9
    (s.tokens().size - engine.tokenize(prompt).size - 1) / dt
}

fun blockingStream(): Double {
    val s = fresh()
    val st = s.stream(prompt, greedy(n))
    st.nextBlocking()
    val t0 = System.nanoTime()
    while (st.nextBlocking() != null) {}
    val dt = (System.nanoTime() - t0) / 1e9
    st.destroy()
    return (s.tokens().size - engine.tokenize(prompt).size - 1) / dt
}

whole() // warm up
repeat(3) { flowed(); blockingStream() } // and the JIT: the streaming paths run JVM code per token
val res = mutableMapOf("cli" to mutableListOf<Double>(), "generate" to mutableListOf(), "flow" to mutableListOf(), "nextBlocking" to mutableListOf())
for (r in 1..rounds) {
    res["cli"]!!.add(cli()); res["generate"]!!.add(whole()); res["flow"]!!.add(flowed()); res["nextBlocking"]!!.add(blockingStream())
    System.err.println("round $r: " + res.entries.joinToString(", ") { "${it.key} ${"%.1f".format(it.value.last())}" })
}
fun med(v: List<Double>) = v.sorted().let { if (it.size % 2 == 1) it[it.size / 2] else (it[it.size / 2 - 1] + it[it.size / 2]) / 2 }
val c = med(res["cli"]!!); val g = med(res["generate"]!!); val f = med(res["flow"]!!); val b = med(res["nextBlocking"]!!)
println("kotlin  cli %.1f tok/s; generate %.1f (%.3f); flow %.1f (%.3f); nextBlocking %.1f (%.3f)  [%s, %d tokens, -t %d, medians of %d]"
    .format(c, g, g / c, f, f / c, b, b / c, model, n.toInt(), threads.toInt(), rounds))
