//! GGUF container: reader and writer.
