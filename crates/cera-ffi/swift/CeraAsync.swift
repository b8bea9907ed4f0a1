// Swift concurrency wrappers over the generated bindings (Cera.swift): generations as
// `AsyncThrowingStream`s. Not compiled in this repository's CI (no Swift toolchain on Linux
// here); see the README's "Kotlin and Swift" section.
import Foundation

extension TextStream {
    /// The pieces of this stream; ending the iteration early stops the engine.
    public func pieces() -> AsyncThrowingStream<String, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    while let piece = try await self.next() {
                        continuation.yield(piece)
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in
                task.cancel()
                self.stop()
            }
        }
    }
}

extension Session {
    /// `prompt`'s continuation as an async sequence of text pieces.
    public func generateStream(_ prompt: String, config: GenerateConfig) throws
        -> AsyncThrowingStream<String, Error>
    {
        try stream(prompt: prompt, config: config).pieces()
    }
}
