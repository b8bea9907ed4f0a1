// Kotlin coroutine wrappers over the generated bindings (compiled with them into one library):
// generations as `Flow`s. The stream's `next()` is a `suspend` call into Rust, so collecting
// never blocks a dispatcher thread; cancelling the collector destroys the stream, which stops
// the engine at the next token.
package dev.cera

import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow

/** The pieces of this stream as a cold `Flow`, destroying the stream when collection ends. */
fun TextStream.asFlow(): Flow<String> = flow {
    this@asFlow.use { s ->
        while (true) {
            val piece = s.next() ?: break
            emit(piece)
        }
    }
}

/** `prompt`'s continuation as a `Flow` of text pieces. */
fun Session.generateFlow(prompt: String, config: GenerateConfig = GenerateConfig()): Flow<String> =
    stream(prompt, config).asFlow()

/** What a streaming chat turn produces: text pieces, then the finished turn. */
sealed class ChatEvent {
    data class Text(val text: String) : ChatEvent()
    data class Done(val turn: Turn) : ChatEvent()
}

/** The assistant's reply as a `Flow`: its raw pieces, then `ChatEvent.Done` with the turn. */
fun Chat.completeFlow(config: TurnConfig): Flow<ChatEvent> = flow {
    stream(config).use { s ->
        while (true) {
            val piece = s.next() ?: break
            emit(ChatEvent.Text(piece))
        }
        s.turn()?.let { emit(ChatEvent.Done(it)) }
    }
}
