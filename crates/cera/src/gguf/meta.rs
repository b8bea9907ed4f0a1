//! Typed metadata accessors whose errors name the key.

use super::reader::GgufFile;
use super::value::{Array, Value};
use crate::error::{Error, Result};

/// A Rust type a metadata value can be read as. Integers convert between widths when the value
/// fits; floats accept integers.
pub trait FromValue: Sized {
    const EXPECTED: &'static str;
    fn from_value(v: &Value) -> Option<Self>;
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            const EXPECTED: &'static str = stringify!($t);
            fn from_value(v: &Value) -> Option<Self> {
                v.as_int().and_then(|x| <$t>::try_from(x).ok())
            }
        }
    )*};
}
int_from_value!(u8, i8, u16, i16, u32, i32, u64, i64, usize);

impl FromValue for f32 {
    const EXPECTED: &'static str = "f32";
    fn from_value(v: &Value) -> Option<Self> {
        v.as_f64().map(|x| x as f32)
    }
}

impl FromValue for f64 {
    const EXPECTED: &'static str = "f64";
    fn from_value(v: &Value) -> Option<Self> {
        v.as_f64()
    }
}

impl FromValue for bool {
    const EXPECTED: &'static str = "bool";
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

impl FromValue for String {
    const EXPECTED: &'static str = "string";
    fn from_value(v: &Value) -> Option<Self> {
        v.as_str().map(str::to_owned)
    }
}

impl GgufFile {
    /// Reads `key` as `T`; missing keys and type mismatches are errors naming the key.
    pub fn get_as<T: FromValue>(&self, key: &str) -> Result<T> {
        self.get_opt(key)?
            .ok_or_else(|| Error::MissingKey(key.to_owned()))
    }

    /// Reads `key` as `T` when present.
    pub fn get_opt<T: FromValue>(&self, key: &str) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => T::from_value(v).map(Some).ok_or_else(|| Error::KeyType {
                key: key.to_owned(),
                expected: T::EXPECTED,
                found: v.type_desc(),
            }),
        }
    }

    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.get_as(key)
    }

    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.get_as(key)
    }

    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.get_as(key)
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.get_as(key)
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self
            .get(key)
            .ok_or_else(|| Error::MissingKey(key.to_owned()))?;
        v.as_str().ok_or_else(|| Error::KeyType {
            key: key.to_owned(),
            expected: "string",
            found: v.type_desc(),
        })
    }

    pub fn get_array(&self, key: &str) -> Result<&Array> {
        let v = self
            .get(key)
            .ok_or_else(|| Error::MissingKey(key.to_owned()))?;
        v.as_array().ok_or_else(|| Error::KeyType {
            key: key.to_owned(),
            expected: "array",
            found: v.type_desc(),
        })
    }

    pub fn get_str_array(&self, key: &str) -> Result<&[String]> {
        match self.get_array(key)? {
            Array::String(v) => Ok(v),
            a => Err(Error::KeyType {
                key: key.to_owned(),
                expected: "array[string]",
                found: format!("array[{}]", a.elem_type()),
            }),
        }
    }

    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        let a = self.get_array(key)?;
        a.to_f32_vec().ok_or_else(|| Error::KeyType {
            key: key.to_owned(),
            expected: "array of numbers",
            found: format!("array[{}]", a.elem_type()),
        })
    }

    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>> {
        let a = self.get_array(key)?;
        a.to_i64_vec().ok_or_else(|| Error::KeyType {
            key: key.to_owned(),
            expected: "array of integers",
            found: format!("array[{}]", a.elem_type()),
        })
    }

    /// A per-layer integer: either one scalar for every layer or an array with one entry per
    /// layer (as LFM2's `attention.head_count_kv`).
    pub fn get_per_layer_u32(&self, key: &str, n_layers: usize) -> Result<Vec<u32>> {
        let v = self
            .get(key)
            .ok_or_else(|| Error::MissingKey(key.to_owned()))?;
        let bad = |found: String| Error::KeyType {
            key: key.to_owned(),
            expected: "u32 or array of n_layers u32",
            found,
        };
        match v {
            Value::Array(a) => {
                let vals = a.to_i64_vec().ok_or_else(|| bad(v.type_desc()))?;
                if vals.len() != n_layers {
                    return Err(bad(format!(
                        "array of {} (model has {n_layers} layers)",
                        vals.len()
                    )));
                }
                vals.into_iter()
                    .map(|x| u32::try_from(x).map_err(|_| bad(format!("element {x}"))))
                    .collect()
            }
            _ => {
                let x = u32::from_value(v).ok_or_else(|| bad(v.type_desc()))?;
                Ok(vec![x; n_layers])
            }
        }
    }
}
