//! `json.loads` as CPython 3.11 does it (the C scanner), because the released rewards parse every
//! point list and ground truth with it and serde_json disagrees on what is valid and what comes out.
//!
//! What Python accepts and we therefore accept: `NaN`, `Infinity`, `-Infinity` (exact case);
//! integers of any length up to 4300 digits (exact, see [`PyInt`]); floats correctly rounded, with
//! `1e400` becoming `inf`; duplicate object keys (the last wins); lone `\uD800`-style surrogates
//! (kept by Python, replaced by U+FFFD here: such a string can never equal a key or direction
//! the rewards look for, in either language). Whitespace between tokens is only space, tab, LF
//! and CR.
//!
//! What Python rejects and we reject: trailing commas, single quotes, `01`, `1.`, `.5`, `+1`,
//! `0x10`, bare words, control characters inside strings, a byte-order mark, anything after the
//! value (`Extra data`). Integer literals over 4300 digits raise `ValueError` (Python 3.11's
//! int-to-str limit), not `JSONDecodeError`; nesting deeper than [`MAX_DEPTH`] raises
//! `RecursionError` (CPython's limit depends on the caller's stack depth: about 994 from an empty
//! stack, a few less inside a trainer).

use super::pyint::PyInt;

/// Deepest nesting of arrays/objects accepted; deeper input fails like CPython's
/// `RecursionError`.
pub const MAX_DEPTH: usize = 990;

/// Python's `int(str)` limit (`sys.get_int_max_str_digits()`, default 4300 since 3.11).
pub const MAX_INT_DIGITS: usize = 4300;

/// A value as `json.loads` returns it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    Null,
    /// `True` / `False` (a Python `int` subclass: arithmetic and `isinstance(x, int)` see 1 / 0).
    Bool(bool),
    /// `int`.
    Int(PyInt),
    /// `float`.
    Float(f64),
    /// `str`.
    Str(String),
    /// `list`.
    List(Vec<Value>),
    /// `dict`, in source order; duplicate keys are all kept and [`Value::get`] returns the last.
    Dict(Vec<(String, Value)>),
}

impl Value {
    /// `d.get(key)` for a dict (the last duplicate wins, as `dict` keeps the last value); `None`
    /// for a missing key or a value that is not a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The elements when this is a `list`.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) => Some(v),
            _ => None,
        }
    }

    /// `isinstance(self, list) and len(self) == n`.
    pub fn is_list_of_len(&self, n: usize) -> bool {
        matches!(self, Value::List(v) if v.len() == n)
    }

    /// `isinstance(self, (int, float))` (bools included, as in Python).
    pub fn is_number(&self) -> bool {
        matches!(self, Value::Bool(_) | Value::Int(_) | Value::Float(_))
    }
}

/// Why `json.loads` raised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// `json.JSONDecodeError` (a `ValueError` subclass).
    #[error("JSONDecodeError: {msg} (char {pos})")]
    Decode {
        /// CPython's message.
        msg: &'static str,
        /// Character offset where CPython reports it (a byte offset here).
        pos: usize,
    },
    /// `ValueError`: an integer literal longer than [`MAX_INT_DIGITS`].
    #[error("ValueError: integer literal of {0} digits exceeds the limit of 4300")]
    IntTooLong(usize),
    /// `RecursionError`: nesting deeper than [`MAX_DEPTH`].
    #[error("RecursionError: JSON nested deeper than {MAX_DEPTH}")]
    TooDeep,
}

impl JsonError {
    /// The Python exception class this corresponds to.
    pub fn python_class(&self) -> &'static str {
        match self {
            JsonError::Decode { .. } => "JSONDecodeError",
            JsonError::IntTooLong(_) => "ValueError",
            JsonError::TooDeep => "RecursionError",
        }
    }
}

/// `json.loads(s)`.
pub fn loads(s: &str) -> Result<Value, JsonError> {
    let mut p = Parser {
        s: s.as_bytes(),
        src: s,
        i: 0,
    };
    p.skip_ws();
    let v = p.value()?;
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(p.err("Extra data"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn err(&self, msg: &'static str) -> JsonError {
        JsonError::Decode { msg, pos: self.i }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn starts_with(&self, lit: &str) -> bool {
        self.s[self.i..].starts_with(lit.as_bytes())
    }

    /// One value, iteratively (an explicit stack of open containers instead of recursion, so
    /// hostile nesting cannot overflow the thread's stack before [`MAX_DEPTH`] is reached).
    fn value(&mut self) -> Result<Value, JsonError> {
        enum Open {
            List(Vec<Value>),
            Dict(Vec<(String, Value)>, String),
        }
        let mut stack: Vec<Open> = Vec::new();
        'parse: loop {
            // Parse the start of a value; containers open a frame and parse their first element.
            let mut done = match self.peek() {
                Some(b'[') | Some(b'{') if stack.len() >= MAX_DEPTH => {
                    return Err(JsonError::TooDeep)
                }
                Some(b'[') => {
                    self.i += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                        Value::List(Vec::new())
                    } else {
                        stack.push(Open::List(Vec::new()));
                        continue 'parse;
                    }
                }
                Some(b'{') => {
                    self.i += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                        Value::Dict(Vec::new())
                    } else {
                        let key = self.key()?;
                        stack.push(Open::Dict(Vec::new(), key));
                        continue 'parse;
                    }
                }
                _ => self.scalar()?,
            };
            // A value is complete: hand it to the innermost open container.
            loop {
                let Some(top) = stack.last_mut() else {
                    return Ok(done);
                };
                match top {
                    Open::List(items) => items.push(done),
                    Open::Dict(items, key) => items.push((std::mem::take(key), done)),
                }
                self.skip_ws();
                let close = if matches!(top, Open::List(_)) {
                    b']'
                } else {
                    b'}'
                };
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        self.skip_ws();
                        if let Open::Dict(_, key) = top {
                            *key = self.key()?;
                        }
                        continue 'parse;
                    }
                    Some(c) if c == close => {
                        self.i += 1;
                        done = match stack.pop() {
                            Some(Open::List(items)) => Value::List(items),
                            Some(Open::Dict(items, _)) => Value::Dict(items),
                            None => return Err(self.err("Expecting value")),
                        };
                    }
                    _ => return Err(self.err("Expecting ',' delimiter")),
                }
            }
        }
    }

    /// `"key" :` of an object member, leaving the position at the value.
    fn key(&mut self) -> Result<String, JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.err("Expecting property name enclosed in double quotes"));
        }
        let key = self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.err("Expecting ':' delimiter"));
        }
        self.i += 1;
        self.skip_ws();
        Ok(key)
    }

    /// A value that is not a container.
    fn scalar(&mut self) -> Result<Value, JsonError> {
        match self.peek() {
            None => Err(self.err("Expecting value")),
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'n') if self.starts_with("null") => {
                self.i += 4;
                Ok(Value::Null)
            }
            Some(b't') if self.starts_with("true") => {
                self.i += 4;
                Ok(Value::Bool(true))
            }
            Some(b'f') if self.starts_with("false") => {
                self.i += 5;
                Ok(Value::Bool(false))
            }
            Some(b'N') if self.starts_with("NaN") => {
                self.i += 3;
                Ok(Value::Float(f64::NAN))
            }
            Some(b'I') if self.starts_with("Infinity") => {
                self.i += 8;
                Ok(Value::Float(f64::INFINITY))
            }
            Some(b'-') if self.starts_with("-Infinity") => {
                self.i += 9;
                Ok(Value::Float(f64::NEG_INFINITY))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("Expecting value")),
        }
    }

    /// CPython's `_match_number_unicode`: `-?(0|[1-9][0-9]*)`, then `.` only when a digit
    /// follows, then an exponent only when it has digits (otherwise the scan backs off).
    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.i;
        let is_digit = |c: Option<u8>| matches!(c, Some(b'0'..=b'9'));
        let neg = self.peek() == Some(b'-');
        if neg {
            self.i += 1;
        }
        match self.peek() {
            Some(b'1'..=b'9') => {
                self.i += 1;
                while is_digit(self.peek()) {
                    self.i += 1;
                }
            }
            Some(b'0') => self.i += 1,
            _ => {
                self.i = start;
                return Err(self.err("Expecting value"));
            }
        }
        let int_end = self.i;
        let mut is_float = false;
        if self.peek() == Some(b'.') && is_digit(self.s.get(self.i + 1).copied()) {
            is_float = true;
            self.i += 2;
            while is_digit(self.peek()) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let e_start = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'-' | b'+')) {
                self.i += 1;
            }
            let digits_start = self.i;
            while is_digit(self.peek()) {
                self.i += 1;
            }
            if self.i > digits_start {
                is_float = true;
            } else {
                self.i = e_start;
            }
        }
        let text = &self.src[start..self.i];
        if is_float {
            // Rust's parser is correctly rounded like CPython's, overflow gives inf.
            let v: f64 = text.parse().map_err(|_| self.err("Expecting value"))?;
            Ok(Value::Float(v))
        } else {
            let digits = &self.src[if neg { start + 1 } else { start }..int_end];
            if digits.len() > MAX_INT_DIGITS {
                return Err(JsonError::IntTooLong(digits.len()));
            }
            Ok(Value::Int(PyInt::from_decimal_digits(digits, neg)))
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let h = self.s.get(at..at + 4)?;
        let mut v = 0u32;
        for &c in h {
            v = v * 16 + (c as char).to_digit(16)?;
        }
        Some(v)
    }

    /// A string starting at the opening quote (CPython's `scanstring`, strict mode).
    fn string(&mut self) -> Result<String, JsonError> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let run_start = self.i;
            while let Some(c) = self.peek() {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.push_str(&self.src[run_start..self.i]);
            match self.peek() {
                None => return Err(self.err("Unterminated string starting at")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.err("Unterminated string starting at"));
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let Some(u) = self.hex4(self.i) else {
                                return Err(self.err("Invalid \\uXXXX escape"));
                            };
                            self.i += 4;
                            let mut cp = u;
                            if (0xd800..0xdc00).contains(&u)
                                && self.s.get(self.i) == Some(&b'\\')
                                && self.s.get(self.i + 1) == Some(&b'u')
                            {
                                if let Some(lo) = self.hex4(self.i + 2) {
                                    if (0xdc00..0xe000).contains(&lo) {
                                        cp = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
                                        self.i += 6;
                                    }
                                }
                            }
                            out.push(char::from_u32(cp).unwrap_or('\u{fffd}'));
                        }
                        _ => {
                            self.i -= 1;
                            return Err(self.err("Invalid \\escape"));
                        }
                    }
                }
                Some(_) => return Err(self.err("Invalid control character at")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(s: &str) -> f64 {
        match loads(s) {
            Ok(Value::Float(v)) => v,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn python_leniency() {
        assert!(f("NaN").is_nan());
        assert_eq!(f("Infinity"), f64::INFINITY);
        assert_eq!(f("-Infinity"), f64::NEG_INFINITY);
        assert_eq!(f("1e400"), f64::INFINITY);
        assert_eq!(f(" \t1.5e1\r\n"), 15.0);
        let v = loads(r#"{"a": 1, "a": 2}"#).unwrap();
        assert_eq!(v.get("a"), Some(&Value::Int(PyInt::from_i64(2))));
        assert_eq!(loads(r#""\ud83d\ude00""#).unwrap(), Value::Str("😀".into()));
        assert_eq!(loads(r#""\u0062box""#).unwrap(), Value::Str("bbox".into()));
    }

    #[test]
    fn python_rejections() {
        for bad in [
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "+1",
            "0x10",
            "nan",
            "'a'",
            "[1 2]",
            "\u{feff}[1]",
            "",
            "\"a\u{1}\"",
            "[1]]",
            "-",
            "1e",
            "tru",
            "\"\\x\"",
        ] {
            match loads(bad) {
                Err(JsonError::Decode { .. }) => {}
                other => panic!("{bad:?} -> {other:?}"),
            }
        }
        let long = format!("[{}]", "1".repeat(4301));
        assert_eq!(loads(&long), Err(JsonError::IntTooLong(4301)));
        assert!(loads(&format!("[{}]", "1".repeat(4300))).is_ok());
        let deep = format!("{}{}", "[".repeat(3000), "]".repeat(3000));
        assert_eq!(loads(&deep), Err(JsonError::TooDeep));
        let ok = format!("{}{}", "[".repeat(500), "]".repeat(500));
        assert!(loads(&ok).is_ok());
    }
}
