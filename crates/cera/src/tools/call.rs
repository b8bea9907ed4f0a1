//! A tool call: what the model asked to run, as templates and OpenAI's API show it.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value as Json};

/// A call of a function tool by the assistant.
///
/// Serialized as `{"type": "function", "id": .., "function": {"name": .., "arguments": ..}}`
/// (`id` left out when `None`). `arguments` is passed to the template as it is; Hugging Face
/// templates expect an object. When deserializing, arguments given as a string holding a JSON
/// object (the OpenAI wire format) are parsed into that object.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: Json,
}

impl ToolCall {
    pub fn new(id: Option<String>, name: impl Into<String>, arguments: Json) -> ToolCall {
        ToolCall {
            id,
            name: name.into(),
            arguments,
        }
    }

    /// The OpenAI-shaped JSON object templates see.
    pub fn to_json(&self) -> Json {
        let mut function = Map::new();
        function.insert("name".into(), Json::String(self.name.clone()));
        function.insert("arguments".into(), self.arguments.clone());
        let mut call = Map::new();
        call.insert("type".into(), Json::String("function".into()));
        if let Some(id) = &self.id {
            call.insert("id".into(), Json::String(id.clone()));
        }
        call.insert("function".into(), Json::Object(function));
        Json::Object(call)
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = Json::deserialize(deserializer)?;
        let obj = v
            .as_object()
            .ok_or_else(|| D::Error::custom("tool call must be an object"))?;
        // Accept both the OpenAI shape and a flat {"name", "arguments"} object.
        let func = match obj.get("function") {
            Some(Json::Object(f)) => f,
            Some(_) => return Err(D::Error::custom("tool call 'function' must be an object")),
            None => obj,
        };
        let name = func
            .get("name")
            .and_then(Json::as_str)
            .ok_or_else(|| D::Error::custom("tool call has no function name"))?
            .to_owned();
        let arguments = match func.get("arguments") {
            None | Some(Json::Null) => Json::Object(Map::new()),
            Some(Json::String(s)) => match serde_json::from_str::<Json>(s) {
                Ok(parsed @ Json::Object(_)) => parsed,
                _ => Json::String(s.clone()),
            },
            Some(other) => other.clone(),
        };
        let id = match obj.get("id") {
            None | Some(Json::Null) => None,
            Some(Json::String(s)) => Some(s.clone()),
            Some(_) => return Err(D::Error::custom("tool call 'id' must be a string")),
        };
        Ok(ToolCall {
            id,
            name,
            arguments,
        })
    }
}
