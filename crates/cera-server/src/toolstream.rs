//! Streaming with tools: text outside tool calls streams as content; from the first call
//! marker on (and while the text so far could still become one), it is held, and at the end
//! parsed into calls, which are streamed the OpenAI way (id, type and name first, then the
//! arguments).

use cera::tools::ToolFormat;

pub struct ToolSplitter {
    markers: &'static [&'static str],
    held: String,
    /// A marker was seen: everything from it on is held for parsing.
    in_call: bool,
}

impl ToolSplitter {
    pub fn new(format: ToolFormat) -> ToolSplitter {
        ToolSplitter {
            markers: format.markers(),
            held: String::new(),
            in_call: false,
        }
    }

    /// Adds text; returns what can be streamed as content now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.in_call {
            return String::new();
        }
        if let Some(at) = self.markers.iter().filter_map(|m| self.held.find(m)).min() {
            self.in_call = true;
            let out = self.held[..at].to_owned();
            self.held.drain(..at);
            return out;
        }
        // keep a tail that may be the start of a marker
        let keep = cera::decode::partial_match_len(&self.held, self.markers);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        out
    }

    /// The held text at the end (calls to parse, or the tail of the content).
    pub fn finish(&mut self) -> (bool, String) {
        (self.in_call, std::mem::take(&mut self.held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_streams_and_calls_are_held() {
        let mut s = ToolSplitter::new(ToolFormat::Hermes);
        let mut out = String::new();
        for p in [
            "Let me ",
            "check. <tool",
            "_call>{\"name\"",
            ": \"f\"}</tool_call>",
        ] {
            out.push_str(&s.push(p));
        }
        assert_eq!(out, "Let me check. ");
        let (in_call, held) = s.finish();
        assert!(in_call);
        assert!(held.starts_with("<tool_call>"));
        let mut s = ToolSplitter::new(ToolFormat::Hermes);
        assert_eq!(s.push("a <tool"), "a ");
        assert_eq!(s.push("box>"), "<toolbox>");
        assert_eq!(s.finish(), (false, String::new()));
    }
}
