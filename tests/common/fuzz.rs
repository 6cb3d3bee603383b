//! The counted property-test runner and the input mutators shared by the fuzz tests
//! (`pointing_fuzz`, `fuzz_readers`).
//!
//! Generation is driven by one random `u64` per case through [`Rng`] rather than by a tree of
//! proptest strategies: a mutated 10 kB scene file would otherwise be a value tree of thousands of
//! nodes, and building it (not reading the file) would be the cost of the test. A failing case is
//! reported with its seed and an excerpt of the input it produced.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::any;
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Number, Value};

/// Environment variable that replaces every fuzz test's default case count (the CI size).
pub const CASES_ENV: &str = "POINTACT_FUZZ_CASES";

/// Environment variable that fixes every case's seed: with `POINTACT_FUZZ_CASES=1` it replays the
/// case a failure reported (`POINTACT_FUZZ_SEED=0x…`), and failure messages then show the whole
/// input instead of its start.
pub const SEED_ENV: &str = "POINTACT_FUZZ_SEED";

/// The seed of each case, which drives an [`Rng`]: random, or [`SEED_ENV`]'s. Not shrunk: a
/// smaller seed gives an unrelated input, not a smaller one.
pub fn case_seeds() -> impl Strategy<Value = u64> {
    let fixed = std::env::var(SEED_ENV).ok().map(|v| {
        let v = v.trim();
        let parsed = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse(),
        };
        parsed.unwrap_or_else(|_| panic!("{SEED_ENV}={v:?} is not a seed"))
    });
    any::<u64>()
        .no_shrink()
        .prop_map(move |s| fixed.unwrap_or(s))
}

/// `default`, unless [`CASES_ENV`] asks for another count.
pub fn cases(default: u32) -> u32 {
    match std::env::var(CASES_ENV) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{CASES_ENV}={v:?} is not a number of cases")),
        Err(_) => default,
    }
}

/// Runs `cases` cases of `strategy` through `check` (which says whether the input was accepted),
/// asserts they all ran, and returns how many were accepted, so each test can show it reached the
/// `Ok` path too. A panic inside `check` is caught by the runner and fails the test.
pub fn run<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<bool, TestCaseError>,
) -> usize {
    let counter = AtomicUsize::new(0);
    let accepted = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |value| {
        counter.fetch_add(1, Ordering::Relaxed);
        if check(value)? {
            accepted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    let ran = counter.load(Ordering::Relaxed);
    assert!(
        ran >= cases as usize,
        "{name}: only {ran} of {cases} cases ran"
    );
    let accepted = accepted.load(Ordering::Relaxed);
    // Printed, never asserted: how long a run takes depends on the machine.
    eprintln!(
        "{name}: {ran} cases, {accepted} accepted, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    accepted
}

/// The start of `bytes`, escaped, for a failure message (inputs can be megabytes); all of it
/// when a single seed is replayed ([`SEED_ENV`]).
pub fn excerpt(bytes: &[u8]) -> String {
    let max = if std::env::var_os(SEED_ENV).is_some() {
        usize::MAX
    } else {
        1500
    };
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]);
    let more = bytes.len().saturating_sub(max);
    if more == 0 {
        format!("{text:?}")
    } else {
        format!("{text:?}… ({more} more bytes)")
    }
}

/// SplitMix64: a tiny, fast, seedable generator (the quality needed here is "varied", not
/// "cryptographic").
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A count that is usually small: 1 with probability 1/2, 2 with 1/4, … up to `max`.
    pub fn few(&mut self, max: usize) -> usize {
        let mut n = 1;
        while n < max && self.chance(1, 2) {
            n += 1;
        }
        n
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// Numbers that break readers: non-finite, extreme, signed zero, subnormal, boundary integers.
pub const HOSTILE_FLOATS: &[f64] = &[
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::MAX,
    f64::MIN,
    1e308,
    -1e308,
    1e154,
    f64::MIN_POSITIVE,
    5e-324,
    -0.0,
    0.0,
    1e-300,
    -1.0,
    1.0,
    0.5,
    2.0,
    1e9,
    -1e9,
    9_007_199_254_740_993.0,
    3.4e38,
    3.5e38,
    1e-45,
];

pub const HOSTILE_INTS: &[i64] = &[
    0,
    1,
    -1,
    2,
    3,
    i64::MAX,
    i64::MIN,
    i32::MAX as i64,
    i32::MIN as i64,
    u32::MAX as i64,
    u32::MAX as i64 + 1,
    65_535,
    65_536,
    1 << 40,
    -(1 << 40),
    100_000_000,
];

/// Literals that no tree value can hold (overflowing, malformed or non-JSON numbers), spliced
/// into rendered text through [`raw`].
pub const HOSTILE_LITERALS: &[&str] = &[
    "nan",
    "+nan",
    "-nan",
    "inf",
    "+inf",
    "-inf",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e400",
    "1e-400",
    "18446744073709551616",
    "18446744073709551615",
    "-9223372036854775809",
    "99999999999999999999999999999999999999",
    "-0",
    "-0.0",
    "0x10",
    "0o17",
    "0b101",
    "1_000",
    "1__0",
    "01",
    "1.",
    ".5",
    "1e",
    "+",
    "-",
    "1979-05-27T07:32:00Z",
    "07:32:00",
    "true",
    "null",
];

pub const HOSTILE_STRINGS: &[&str] = &[
    "",
    " ",
    "\u{0}",
    "\n",
    "é",
    "☕",
    "\u{202e}",
    "\u{feff}",
    "../x",
    "/abs/path",
    "a/b",
    "a\\b",
    ".",
    "..",
    "NaN",
    "inf",
    "1e999",
    "[",
    "{",
    "\"",
    "'''",
    "\\u0000",
    "%s%n",
];

/// A marker for a literal the tree cannot hold, replaced by the literal itself by [`render`].
pub fn raw(literal: &str) -> Value {
    Value::String(format!("@@raw:{literal}@@"))
}

fn float_value(x: f64) -> Value {
    match Number::from_f64(x) {
        Some(n) => Value::Number(n),
        // JSON numbers cannot be NaN or infinite: spell them out (valid TOML, invalid JSON).
        None if x.is_nan() => raw("nan"),
        None if x > 0.0 => raw("inf"),
        None => raw("-inf"),
    }
}

/// The text format a tree is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Toml,
    Json,
}

/// A tree ready for structural mutation: TOML is carried as JSON values (TOML has no null, so
/// mutations never make one in TOML mode), written back by [`render`].
pub fn parse_tree(text: &str, syntax: Syntax) -> Value {
    match syntax {
        Syntax::Toml => {
            let t: toml::Value = toml::from_str(text).expect("a seed that is valid TOML");
            serde_json::to_value(t).expect("TOML as a JSON tree")
        }
        Syntax::Json => serde_json::from_str(text).expect("a seed that is valid JSON"),
    }
}

/// Writes a tree as text, substituting [`raw`] markers; `None` when the tree cannot be written in
/// this syntax (e.g. TOML arrays mixing tables and values in some positions).
pub fn render(tree: &Value, syntax: Syntax) -> Option<String> {
    let text = match syntax {
        Syntax::Toml => {
            let t = toml::Value::try_from(tree).ok()?;
            match t {
                toml::Value::Table(t) => toml::to_string(&t).ok()?,
                other => format!("value = {other}"),
            }
        }
        Syntax::Json => serde_json::to_string_pretty(tree).ok()?,
    };
    Some(unraw(&text))
}

/// Replaces every quoted `@@raw:…@@` marker by its bare literal.
fn unraw(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("\"@@raw:") {
        let Some(end) = rest[start..].find("@@\"") else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(&rest[start + 7..start + end]);
        rest = &rest[start + end + 3..];
    }
    out.push_str(rest);
    out
}

/// Every string leaf and object key of a tree: names a mutation can move elsewhere (a joint name
/// into a link field, an object kind into a colour).
pub fn vocabulary(tree: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            Value::Object(o) => {
                for (k, v) in o {
                    out.push(k.clone());
                    walk(v, out);
                }
            }
            _ => {}
        }
    }
    walk(tree, &mut out);
    out.sort();
    out.dedup();
    out
}

/// A random value of any type, at most `depth` levels deep.
pub fn random_value(rng: &mut Rng, syntax: Syntax, vocab: &[String], depth: usize) -> Value {
    let kinds = if depth == 0 { 6 } else { 8 };
    match rng.below(kinds) {
        0 => Value::String(random_string(rng, vocab)),
        1 => Value::from(*rng.pick(HOSTILE_INTS)),
        2 => float_value(*rng.pick(HOSTILE_FLOATS)),
        3 => Value::Bool(rng.chance(1, 2)),
        4 if syntax == Syntax::Json && rng.chance(1, 2) => Value::Null,
        4 | 5 => match rng.below(3) {
            0 => raw(rng.pick::<&str>(HOSTILE_LITERALS)),
            1 => float_value((rng.unit() - 0.5) * 10f64.powi(rng.below(12) as i32 - 4)),
            _ => Value::from(rng.next_u64() as i64 >> rng.below(64)),
        },
        6 => Value::Array(
            (0..rng.below(5))
                .map(|_| random_value(rng, syntax, vocab, depth - 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.below(4))
                .map(|_| {
                    (
                        random_string(rng, vocab),
                        random_value(rng, syntax, vocab, depth - 1),
                    )
                })
                .collect(),
        ),
    }
}

/// A string from the seed's vocabulary, a hostile one, a random one or a huge one.
pub fn random_string(rng: &mut Rng, vocab: &[String]) -> String {
    match rng.below(10) {
        0..=4 if !vocab.is_empty() => rng.pick(vocab).clone(),
        0..=6 => rng.pick(HOSTILE_STRINGS).to_string(),
        7 | 8 => {
            let len = rng.below(24);
            String::from_utf8_lossy(&rng.bytes(len)).into_owned()
        }
        _ => {
            let unit = rng
                .pick(&["x", "é", "☕", "\\", "\"", "<", "]"])
                .to_string();
            unit.repeat(1 << rng.below(17))
        }
    }
}

/// Applies 1–4 structural mutations to `tree`: replace a value by one of another type or by a
/// hostile one of its own type, nudge a number, drop, add or duplicate keys and elements, swap two
/// values, wrap a value in arrays. Numbers are nudged often enough that mutated files still pass
/// now and then.
pub fn mutate_tree(rng: &mut Rng, tree: &mut Value, syntax: Syntax, vocab: &[String]) {
    // Two cases in five keep every value's type, so the damage gets past deserialisation into the
    // reader's own range checks (one type change anywhere stops a file at the parser).
    let typed = rng.chance(2, 5);
    for _ in 0..rng.few(4) {
        let node = pick_node(rng, tree, 0);
        if typed && rng.chance(1, 2) {
            hostile_same_type(rng, node, vocab);
        } else if typed {
            nudge(rng, node);
        } else {
            mutate_node(rng, node, syntax, vocab);
        }
    }
}

/// A random node: descend from the root, stopping at each level with probability 1/3 (at the
/// root only 1/20: a file that is not a table at all is one case, not a third of them).
fn pick_node<'a>(rng: &mut Rng, tree: &'a mut Value, level: usize) -> &'a mut Value {
    let stop = if level == 0 { 20 } else { 3 };
    let descend = match tree {
        Value::Array(a) if !a.is_empty() => !rng.chance(1, stop),
        Value::Object(o) if !o.is_empty() => !rng.chance(1, stop),
        _ => false,
    };
    if !descend {
        return tree;
    }
    match tree {
        Value::Array(a) => {
            let i = rng.below(a.len());
            pick_node(rng, &mut a[i], level + 1)
        }
        Value::Object(o) => {
            let i = rng.below(o.len());
            let v = o.values_mut().nth(i).expect("index below len");
            pick_node(rng, v, level + 1)
        }
        _ => unreachable!("only containers descend"),
    }
}

fn mutate_node(rng: &mut Rng, node: &mut Value, syntax: Syntax, vocab: &[String]) {
    match rng.below(14) {
        // A number nudged: still valid most of the time, so the Ok path stays reachable.
        0..=2 => nudge(rng, node),
        // A hostile value of the same type: past the parser, into the reader's own checks.
        12 | 13 => hostile_same_type(rng, node, vocab),
        3 | 4 => *node = random_value(rng, syntax, vocab, 2),
        5 => {
            *node = if rng.chance(1, 2) {
                float_value(*rng.pick(HOSTILE_FLOATS))
            } else {
                raw(rng.pick::<&str>(HOSTILE_LITERALS))
            }
        }
        6 => match node {
            // Drop a key or an element.
            Value::Object(o) if !o.is_empty() => {
                let k = o.keys().nth(rng.below(o.len())).cloned().expect("a key");
                o.remove(&k);
            }
            Value::Array(a) if !a.is_empty() => {
                a.remove(rng.below(a.len()));
            }
            _ => *node = random_value(rng, syntax, vocab, 1),
        },
        7 => match node {
            // Add an unknown key, or an element like a sibling.
            Value::Object(o) => {
                let key = random_string(rng, vocab);
                o.insert(key, random_value(rng, syntax, vocab, 1));
            }
            Value::Array(a) => {
                let v = if a.is_empty() || rng.chance(1, 3) {
                    random_value(rng, syntax, vocab, 1)
                } else {
                    a[rng.below(a.len())].clone()
                };
                let at = rng.below(a.len() + 1);
                a.insert(at, v);
            }
            _ => nudge(rng, node),
        },
        8 => match node {
            // Duplicate: copy one member's value over another's.
            Value::Object(o) if o.len() >= 2 => {
                let keys: Vec<String> = o.keys().cloned().collect();
                let from = o[rng.pick(&keys)].clone();
                o.insert(rng.pick(&keys).clone(), from);
            }
            Value::Array(a) if !a.is_empty() => {
                let v = a[rng.below(a.len())].clone();
                for _ in 0..rng.few(8) {
                    a.push(v.clone());
                }
            }
            _ => *node = Value::String(random_string(rng, vocab)),
        },
        9 => {
            // Deeper nesting: wrap in arrays.
            for _ in 0..rng.few(6) {
                *node = Value::Array(vec![node.take()]);
            }
        }
        10 => match node {
            // Swap two members' values.
            Value::Object(o) if o.len() >= 2 => {
                let keys: Vec<String> = o.keys().cloned().collect();
                let (a, b) = (rng.pick(&keys).clone(), rng.pick(&keys).clone());
                let va = o[&a].clone();
                let vb = std::mem::replace(&mut o[&b], va);
                o[&a] = vb;
            }
            Value::Array(a) if a.len() >= 2 => {
                let (i, j) = (rng.below(a.len()), rng.below(a.len()));
                a.swap(i, j);
            }
            _ => *node = Value::String(random_string(rng, vocab)),
        },
        _ => match node {
            // Empty a container, or make a leaf a container.
            Value::Array(a) => a.clear(),
            Value::Object(o) => *o = Map::new(),
            _ => *node = Value::Array(vec![node.take()]),
        },
    }
}

/// One leaf under `node` replaced by a hostile value of its own type: a float by NaN, ±inf, 1e308,
/// -0…; an integer by `i64::MAX`, -1, 2^32…; a string by an empty, odd or other known one.
fn hostile_same_type(rng: &mut Rng, node: &mut Value, vocab: &[String]) {
    match node {
        Value::Number(n) if n.is_f64() => *node = float_value(*rng.pick(HOSTILE_FLOATS)),
        Value::Number(_) => *node = Value::from(*rng.pick(HOSTILE_INTS)),
        Value::String(_) => *node = Value::String(random_string(rng, vocab)),
        Value::Bool(b) => *b = !*b,
        Value::Array(a) if !a.is_empty() => {
            let i = rng.below(a.len());
            hostile_same_type(rng, &mut a[i], vocab);
        }
        Value::Object(o) if !o.is_empty() => {
            let i = rng.below(o.len());
            if let Some(v) = o.values_mut().nth(i) {
                hostile_same_type(rng, v, vocab);
            }
        }
        _ => {}
    }
}

/// Every number in `node` scaled or shifted a little (or, rarely, by a lot).
fn nudge(rng: &mut Rng, node: &mut Value) {
    match node {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let d = [-1i64, 1, -2, 2, 10, -100][rng.below(6)];
                *node = Value::from(i.saturating_add(d));
            } else if let Some(x) = n.as_f64() {
                let f = match rng.below(6) {
                    0 => -1.0,
                    1 => 10.0,
                    2 => 0.1,
                    _ => 1.0 + (rng.unit() - 0.5) * 0.02,
                };
                *node = float_value(x * f);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| nudge(rng, v)),
        Value::Object(o) => {
            let i = rng.below(o.len().max(1));
            if let Some(v) = o.values_mut().nth(i) {
                nudge(rng, v);
            }
        }
        _ => {}
    }
}

/// Line-level mutations of text: drop, duplicate (in TOML a duplicated key), swap or move lines,
/// insert a member or a hostile literal, nest a value thousands of levels deep; what a hand edit
/// gone wrong looks like. Inserted lines are spelled in `syntax`, so a parser reads up to them.
pub fn mutate_lines(rng: &mut Rng, text: &str, syntax: Syntax, vocab: &[String]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    // `key = value` or `"key": value,`.
    let member = |key: &str, value: &str| match syntax {
        Syntax::Toml => format!("{key} = {value}"),
        Syntax::Json => format!("{}: {value},", Value::String(key.to_owned())),
    };
    for _ in 0..rng.few(4) {
        let n = lines.len();
        if n == 0 {
            lines.push(String::new());
            continue;
        }
        let i = rng.below(n);
        match rng.below(7) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(rng.below(n + 1), l);
            }
            2 => lines.swap(i, rng.below(n)),
            3 => {
                let key = random_string(rng, vocab);
                let lit = rng.pick(HOSTILE_LITERALS);
                lines.insert(i, member(&key, lit));
            }
            4 => {
                // A value replaced by a hostile literal, keeping the key.
                let sep = if syntax == Syntax::Toml { '=' } else { ':' };
                if let Some(at) = lines[i].find(sep) {
                    let lit = rng.pick(HOSTILE_LITERALS);
                    lines[i] = format!("{} {lit}", &lines[i][..=at]);
                }
            }
            5 => {
                // Deep nesting, beyond any parser's recursion limit now and then.
                let depth = 1 << rng.below(15);
                let (open, close) = match (syntax, rng.chance(1, 2)) {
                    (_, true) => ("[", "]"),
                    (Syntax::Toml, false) => ("{a=", "}"),
                    (Syntax::Json, false) => ("{\"a\":", "}"),
                };
                let key = random_string(rng, vocab);
                let value = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                lines.insert(i, member(&key, &value));
            }
            _ => {
                // TOML: a table header or a dotted key many levels deep; JSON: a bare value.
                let depth = 1 << rng.below(14);
                let path = vec!["a"; depth].join(".");
                let line = match (syntax, rng.chance(1, 2)) {
                    (Syntax::Toml, true) => format!("[{path}]"),
                    (Syntax::Toml, false) => format!("{path} = 1"),
                    (Syntax::Json, _) => rng.pick(HOSTILE_LITERALS).to_string(),
                };
                lines.insert(i, line);
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// Byte-level mutations: flip bits, insert, delete, truncate, duplicate a slice, splice in a slice
/// of a donor (another seed), overwrite with a boundary byte.
pub fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>, donors: &[&[u8]]) {
    for _ in 0..rng.few(8) {
        let n = bytes.len();
        let at = rng.below(n + 1);
        match rng.below(8) {
            0 if n > 0 => {
                let i = rng.below(n);
                bytes[i] ^= 1 << rng.below(8);
            }
            1 => {
                let len = rng.few(16);
                let add = rng.bytes(len);
                bytes.splice(at..at, add);
            }
            2 if n > 0 => {
                let end = (at + rng.few(64)).min(n);
                bytes.drain(at..end);
            }
            3 => bytes.truncate(at),
            4 if n > 0 => {
                let from = rng.below(n);
                let end = (from + rng.few(64) * 4).min(n);
                let chunk = bytes[from..end].to_vec();
                bytes.splice(at..at, chunk);
            }
            5 if !donors.is_empty() => {
                let d = rng.pick(donors);
                if !d.is_empty() {
                    let from = rng.below(d.len());
                    let end = (from + rng.few(32) * 8).min(d.len());
                    bytes.splice(at..at, d[from..end].iter().copied());
                }
            }
            6 if n > 0 => {
                let i = rng.below(n);
                bytes[i] = *rng.pick(&[0u8, 0xff, 0x7f, 0x80, b'"', b'\\', b'\n', b'[', b'<']);
            }
            _ => {
                let lit = rng.pick(HOSTILE_LITERALS).as_bytes().to_vec();
                bytes.splice(at..at, lit);
            }
        }
    }
}

/// Random bytes: mostly short, now and then kilobytes.
pub fn arbitrary_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = if rng.chance(1, 10) {
        rng.below(1 << 16)
    } else {
        rng.below(256)
    };
    rng.bytes(len)
}

/// How a text input is damaged: structure first (so the reader's checks see well-formed but wrong
/// values), text and bytes after (so its parser sees broken syntax), or nothing but noise.
pub fn mutate_text(
    rng: &mut Rng,
    seed: &str,
    syntax: Syntax,
    vocab: &[String],
    donors: &[&[u8]],
) -> Vec<u8> {
    let roll = rng.below(100);
    if roll < 5 {
        return arbitrary_bytes(rng);
    }
    let mut text = seed.to_owned();
    if roll < 70 {
        let mut tree = parse_tree(seed, syntax);
        mutate_tree(rng, &mut tree, syntax, vocab);
        if let Some(t) = render(&tree, syntax) {
            text = t;
        }
    }
    if (55..85).contains(&roll) {
        text = mutate_lines(rng, &text, syntax, vocab);
    }
    let mut bytes = text.into_bytes();
    if roll >= 80 {
        mutate_bytes(rng, &mut bytes, donors);
    }
    bytes
}

/// CRC-32 (IEEE), as PNG chunks carry it: lets a mutator change a PNG header and keep it valid.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
