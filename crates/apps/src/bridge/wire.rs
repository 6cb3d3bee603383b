//! The bridge's wire format: openpi's msgpack encoding, where numpy arrays travel as tagged maps.
//!
//! Why this format: the SimplerEnv runners of the openpi family (openpi's own
//! `websocket_client_policy`, starVLA, InternVLA) send one msgpack frame per message through
//! `openpi_client.msgpack_numpy`; speaking it byte for byte lets the stock client drive our server
//! unchanged (openpi `packages/openpi-client/src/openpi_client/msgpack_numpy.py`). What
//! `openpi_client.msgpack_numpy.packb` (openpi-client 0.1.2, on msgpack-python 1.x) writes, as
//! checked against the package:
//!
//! - an `np.ndarray` becomes a map of four entries, in this order, with **bin** keys:
//!   `__ndarray__`: `true`, `data`: bin (the C-order bytes, `tobytes()`), `dtype`: str
//!   (`dtype.str`: `<f4`, `|u1`, …), `shape`: an array of non-negative ints (`()` for 0-d).
//! - a numpy scalar (`np.float32`, `np.int64`, `np.bool_`, …) becomes three entries with bin keys:
//!   `__npgeneric__`: `true`, `data`: the Python value of `item()` (a float64, the smallest int
//!   format, or a bool), `dtype`: str. `np.float64` is a subclass of Python's `float`, so msgpack
//!   writes it as a plain float and it never arrives tagged.
//! - everything else is plain msgpack: `str` → str, `bytes` → bin, lists and tuples → array,
//!   `float` → float64, `int` → the smallest int format (unsigned formats when non-negative), `None`
//!   → nil, dicts in insertion order. So the output is deterministic: the same content in the same
//!   order gives the same bytes, and [`encode`] reproduces them.
//!
//! openpi's `unpackb` recognises a tagged map by the presence of the *bin* key alone; the allenai
//! vla-evaluation-harness writes the same tags with *str* keys. [`decode`] accepts both (and is
//! stricter where openpi would build a broken array: the tag must be `true`, the data exactly as
//! long as the shape says); [`encode`] writes bin keys, the only ones the stock client reads back.
//!
//! A frame comes from a socket, so the decoder trusts nothing: every declared length is checked
//! against the bytes left before anything is allocated, nesting depth, the number of values, the
//! frame and the array payload are bounded ([`Limits`]), and every rejection is a [`WireError`].

use std::fmt;

use bytes::Bytes;

use rmp::encode::{self as enc, ByteBuf, ValueWriteError};
use rmp::Marker;

/// Most bytes of array data (all `data` fields of tagged arrays together) in one frame: an
/// observation with a 640×480 RGB image and a float depth map is about 2.1 MB, so 64 MiB leaves
/// room for several cameras without letting one client pin gigabytes.
pub(crate) const MAX_PAYLOAD_BYTES: usize = 64 << 20;
/// Most bytes in one frame: the array payload plus 1 MiB for everything else.
pub(crate) const MAX_FRAME_BYTES: usize = MAX_PAYLOAD_BYTES + (1 << 20);
/// Deepest nesting of arrays and maps (a tagged array counts two: its map and its shape). Real
/// messages are a few levels deep; the bound keeps the recursive decoder's stack small.
pub(crate) const MAX_DEPTH: usize = 64;
/// Most dimensions of an array (images are 3-D, batches of them 4-D).
pub(crate) const MAX_DIMS: usize = 8;
/// Most msgpack values in one frame: a decoded value takes tens of bytes, so a frame of one-byte
/// nils could otherwise grow ~50 times in memory.
pub(crate) const MAX_VALUES: usize = 1 << 20;

/// The bounds [`decode_with`] enforces; [`Limits::DEFAULT`] is what [`decode`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub max_frame_bytes: usize,
    pub max_payload_bytes: usize,
    pub max_depth: usize,
    pub max_dims: usize,
    pub max_values: usize,
}

impl Limits {
    pub(crate) const DEFAULT: Limits = Limits {
        max_frame_bytes: MAX_FRAME_BYTES,
        max_payload_bytes: MAX_PAYLOAD_BYTES,
        max_depth: MAX_DEPTH,
        max_dims: MAX_DIMS,
        max_values: MAX_VALUES,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Why a frame was refused (or a value could not be built or written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame of {len} bytes is over the {max}-byte limit")]
    FrameTooLarge { len: usize, max: usize },
    #[error("frame ends early: byte {at} needs {needed} more bytes, {left} left")]
    Truncated {
        at: usize,
        needed: usize,
        left: usize,
    },
    #[error("{extra} bytes after the end of the message (a frame holds one msgpack value)")]
    TrailingBytes { extra: usize },
    #[error("reserved msgpack marker 0xc1 at byte {at}")]
    ReservedMarker { at: usize },
    #[error("msgpack extension (type {ext_type}) at byte {at}: the openpi encoding has none")]
    Extension { ext_type: i8, at: usize },
    #[error("msgpack str at byte {at} is not UTF-8")]
    InvalidUtf8 { at: usize },
    #[error("nested deeper than {max} arrays and maps")]
    TooDeep { max: usize },
    #[error("more than {max} values in one frame")]
    TooManyValues { max: usize },
    #[error("`{tag}` map without a `{field}` field")]
    MissingField {
        tag: &'static str,
        field: &'static str,
    },
    #[error("`{tag}` map: `{field}` must be {expected}, found {found}")]
    FieldType {
        tag: &'static str,
        field: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("unsupported dtype {0:?} (supported: <f4 <f8 |u1 |i1 <u2 <i2 <u4 <i4 <u8 <i8 |b1)")]
    UnsupportedDtype(String),
    #[error(
        "big-endian dtype {0:?}: only little-endian arrays are accepted \
         (send `a.astype(a.dtype.newbyteorder('<'))`)"
    )]
    BigEndianDtype(String),
    #[error("array of {ndim} dimensions: at most {max}")]
    TooManyDims { ndim: usize, max: usize },
    #[error("shape {shape:?} of {dtype} overflows the address space")]
    ShapeOverflow { shape: Vec<usize>, dtype: Dtype },
    #[error("shape {shape:?} of {dtype} needs {expected} data bytes, found {found}")]
    DataLength {
        shape: Vec<usize>,
        dtype: Dtype,
        expected: usize,
        found: usize,
    },
    #[error("arrays total {bytes} bytes, over the {max}-byte limit")]
    PayloadTooLarge { bytes: usize, max: usize },
    #[error("numpy scalar of dtype {dtype}: {found} does not fit")]
    ScalarValue { dtype: Dtype, found: String },
    #[error("array has dtype {have}, read as {want}")]
    DtypeMismatch { have: Dtype, want: Dtype },
    #[error("{len} values do not fill shape {shape:?} ({expected} elements)")]
    ValueCount {
        shape: Vec<usize>,
        expected: usize,
        len: usize,
    },
    #[error("{what} of {len} is longer than msgpack can write (2^32 - 1)")]
    TooLong { what: &'static str, len: usize },
}

/// The numpy dtypes the bridge carries: little-endian numbers and bools, named as numpy's
/// `dtype.str` spells them (what openpi sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F32,
    F64,
}

impl Dtype {
    pub(crate) const ALL: [Dtype; 11] = [
        Dtype::Bool,
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::U32,
        Dtype::I32,
        Dtype::U64,
        Dtype::I64,
        Dtype::F32,
        Dtype::F64,
    ];

    /// numpy's `dtype.str`: `|` for one-byte types (byte order does not apply), `<` otherwise.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Dtype::Bool => "|b1",
            Dtype::U8 => "|u1",
            Dtype::I8 => "|i1",
            Dtype::U16 => "<u2",
            Dtype::I16 => "<i2",
            Dtype::U32 => "<u4",
            Dtype::I32 => "<i4",
            Dtype::U64 => "<u8",
            Dtype::I64 => "<i8",
            Dtype::F32 => "<f4",
            Dtype::F64 => "<f8",
        }
    }

    /// Bytes per element.
    pub(crate) fn itemsize(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 => 8,
        }
    }

    /// The dtype numpy spells `s`. Only the canonical spellings numpy's `dtype.str` gives are
    /// accepted; a big-endian one (`>` or `!`) gets its own error, since the fix is on the sender.
    pub(crate) fn parse(s: &str) -> Result<Dtype, WireError> {
        if let Some(d) = Dtype::ALL.into_iter().find(|d| d.as_str() == s) {
            return Ok(d);
        }
        // A dtype string from the wire may be anything: name at most 32 characters of it.
        let shown: String = s.chars().take(32).collect();
        if s.starts_with(['>', '!']) {
            Err(WireError::BigEndianDtype(shown))
        } else {
            Err(WireError::UnsupportedDtype(shown))
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F64)
    }

    /// The integer range of an integer dtype, as i128 so that u64 and i64 both fit.
    fn int_range(self) -> Option<(i128, i128)> {
        let r = match self {
            Dtype::U8 => (0, u8::MAX as i128),
            Dtype::I8 => (i8::MIN as i128, i8::MAX as i128),
            Dtype::U16 => (0, u16::MAX as i128),
            Dtype::I16 => (i16::MIN as i128, i16::MAX as i128),
            Dtype::U32 => (0, u32::MAX as i128),
            Dtype::I32 => (i32::MIN as i128, i32::MAX as i128),
            Dtype::U64 => (0, u64::MAX as i128),
            Dtype::I64 => (i64::MIN as i128, i64::MAX as i128),
            Dtype::Bool | Dtype::F32 | Dtype::F64 => return None,
        };
        Some(r)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type an array's elements can be read as or built from: one per [`Dtype`].
pub(crate) trait Element: Copy + sealed::Sealed {
    const DTYPE: Dtype;
    #[doc(hidden)]
    fn read_le(bytes: &[u8]) -> Self;
    /// Writes the element into `out`, exactly its itemsize long.
    #[doc(hidden)]
    fn write_le(self, out: &mut [u8]);
}

macro_rules! numeric_element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            fn read_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(bytes);
                <$t>::from_le_bytes(a)
            }
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

numeric_element!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: Dtype = Dtype::Bool;
    /// numpy stores bools as one byte and reads any non-zero byte as true.
    fn read_le(bytes: &[u8]) -> Self {
        bytes.iter().any(|&b| b != 0)
    }
    fn write_le(self, out: &mut [u8]) {
        out[0] = u8::from(self);
    }
}

/// A numpy array: dtype, shape and the little-endian C-order bytes, always consistent (the data
/// is exactly `shape product × itemsize` bytes, at most [`MAX_DIMS`] dimensions).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NdArray {
    dtype: Dtype,
    shape: Vec<usize>,
    /// Shared, not owned: a decoded array's data is a view of the received frame
    /// ([`decode_shared`]), so checking a 3.4 MB observation copies none of it.
    data: Bytes,
}

/// `Π shape × itemsize`, `None` on overflow.
fn byte_len(shape: &[usize], dtype: Dtype) -> Option<usize> {
    shape
        .iter()
        .try_fold(dtype.itemsize(), |acc, &d| acc.checked_mul(d))
}

macro_rules! typed_views {
    ($($from:ident, $as:ident, $t:ty);* $(;)?) => {$(
        #[doc = concat!("An array of `", stringify!($t), "` (see [`NdArray::from_slice`]).")]
        pub fn $from(shape: &[usize], values: &[$t]) -> Result<NdArray, WireError> {
            NdArray::from_slice(shape, values)
        }
        #[doc = concat!("The elements as `", stringify!($t), "` (see [`NdArray::to_vec`]).")]
        pub fn $as(&self) -> Result<Vec<$t>, WireError> {
            self.to_vec()
        }
    )*};
}

// The codec's whole API over numpy's dtypes: the server and the tests read only some of them.
#[allow(dead_code)]
impl NdArray {
    /// An array from raw little-endian bytes, checked like a decoded one.
    pub fn new(
        dtype: Dtype,
        shape: Vec<usize>,
        data: impl Into<Bytes>,
    ) -> Result<NdArray, WireError> {
        NdArray::checked(dtype, shape, data.into(), MAX_DIMS)
    }

    /// The one consistency check, for [`NdArray::new`] and the decoder (which has its own limit
    /// on dimensions): at most `max_dims` dimensions, exactly `Π shape × itemsize` data bytes, the
    /// product computed without overflow.
    fn checked(
        dtype: Dtype,
        shape: Vec<usize>,
        data: Bytes,
        max_dims: usize,
    ) -> Result<NdArray, WireError> {
        if shape.len() > max_dims {
            return Err(WireError::TooManyDims {
                ndim: shape.len(),
                max: max_dims,
            });
        }
        let Some(expected) = byte_len(&shape, dtype) else {
            return Err(WireError::ShapeOverflow { shape, dtype });
        };
        if expected != data.len() {
            return Err(WireError::DataLength {
                shape,
                dtype,
                expected,
                found: data.len(),
            });
        }
        Ok(NdArray { dtype, shape, data })
    }

    /// An array of `values` (C order) with `shape`; their count must fill the shape.
    pub(crate) fn from_slice<T: Element>(
        shape: &[usize],
        values: &[T],
    ) -> Result<NdArray, WireError> {
        let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if count != Some(values.len()) {
            return Err(WireError::ValueCount {
                shape: shape.to_vec(),
                expected: count.unwrap_or(usize::MAX),
                len: values.len(),
            });
        }
        // Into a buffer of the final size, element by element into fixed slots (a push per
        // element does not vectorise: 3 ms for a 640x480 frame's arrays).
        let size = T::DTYPE.itemsize();
        let mut data = vec![0u8; values.len() * size];
        for (slot, &v) in data.chunks_exact_mut(size).zip(values) {
            v.write_le(slot);
        }
        NdArray::new(T::DTYPE, shape.to_vec(), data)
    }

    /// The elements as `T`, which must be this array's dtype (no silent conversion: a server that
    /// expects float32 depth should hear that it got float64). [`NdArray::cast_f64`] widens.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, WireError> {
        if self.dtype != T::DTYPE {
            return Err(WireError::DtypeMismatch {
                have: self.dtype,
                want: T::DTYPE,
            });
        }
        Ok(self
            .data
            .chunks_exact(self.dtype.itemsize())
            .map(T::read_le)
            .collect())
    }

    typed_views! {
        from_bool, as_bool, bool;
        from_u8, as_u8, u8;
        from_i8, as_i8, i8;
        from_u16, as_u16, u16;
        from_i16, as_i16, i16;
        from_u32, as_u32, u32;
        from_i32, as_i32, i32;
        from_u64, as_u64, u64;
        from_i64, as_i64, i64;
        from_f32, as_f32, f32;
        from_f64, as_f64, f64;
    }

    /// Every element as f64 whatever the dtype (bools as 0 or 1; 64-bit integers beyond 2^53
    /// rounded): for poses and joint values, which clients send as float32 or float64 alike.
    pub(crate) fn cast_f64(&self) -> Vec<f64> {
        fn all<T: Element>(a: &NdArray, f: impl Fn(T) -> f64) -> Vec<f64> {
            a.data
                .chunks_exact(T::DTYPE.itemsize())
                .map(|c| f(T::read_le(c)))
                .collect()
        }
        match self.dtype {
            Dtype::Bool => all(self, |v: bool| f64::from(u8::from(v))),
            Dtype::U8 => all(self, |v: u8| f64::from(v)),
            Dtype::I8 => all(self, |v: i8| f64::from(v)),
            Dtype::U16 => all(self, |v: u16| f64::from(v)),
            Dtype::I16 => all(self, |v: i16| f64::from(v)),
            Dtype::U32 => all(self, |v: u32| f64::from(v)),
            Dtype::I32 => all(self, |v: i32| f64::from(v)),
            Dtype::U64 => all(self, |v: u64| v as f64),
            Dtype::I64 => all(self, |v: i64| v as f64),
            Dtype::F32 => all(self, |v: f32| f64::from(v)),
            Dtype::F64 => all(self, |v: f64| v),
        }
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The little-endian C-order bytes.
    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn into_data(self) -> Bytes {
        self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.itemsize()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// The value of a numpy scalar as it travels (`item()`'s Python value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
}

impl Scalar {
    fn int(self) -> Option<i128> {
        match self {
            Scalar::Int(v) => Some(v.into()),
            Scalar::UInt(v) => Some(v.into()),
            Scalar::Bool(_) | Scalar::Float(_) => None,
        }
    }

    fn describe(self) -> String {
        match self {
            Scalar::Bool(b) => format!("bool {b}"),
            Scalar::Int(v) => format!("int {v}"),
            Scalar::UInt(v) => format!("int {v}"),
            Scalar::Float(v) => format!("float {v}"),
        }
    }
}

/// A numpy scalar (`np.float32(0.5)`, `np.int64(7)`, `np.bool_(True)`): what openpi tags
/// `__npgeneric__`. Kept apart from a 0-d array because openpi keeps them apart on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NpScalar {
    dtype: Dtype,
    value: Scalar,
}

#[allow(dead_code)]
impl NpScalar {
    /// A scalar whose value fits its dtype: a bool for `|b1`, an integer in range for integer
    /// dtypes, a number for float dtypes (floats as float64, as `item()` gives them).
    pub fn new(dtype: Dtype, value: Scalar) -> Result<NpScalar, WireError> {
        let fits = match (dtype, value) {
            (Dtype::Bool, Scalar::Bool(_)) => true,
            (d, Scalar::Float(_)) => d.is_float(),
            (d, v) if d.is_float() => v.int().is_some(),
            (d, v) => match (d.int_range(), v.int()) {
                (Some((lo, hi)), Some(x)) => (lo..=hi).contains(&x),
                _ => false,
            },
        };
        if !fits {
            return Err(WireError::ScalarValue {
                dtype,
                found: value.describe(),
            });
        }
        Ok(NpScalar { dtype, value })
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    pub fn value(&self) -> Scalar {
        self.value
    }

    /// The value as f64 (bools as 0 or 1).
    pub(crate) fn to_f64(self) -> f64 {
        match self.value {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::Int(v) => v as f64,
            Scalar::UInt(v) => v as f64,
            Scalar::Float(v) => v,
        }
    }
}

/// A decoded message. Maps keep their order and their key types (str or bin), so that a message
/// re-encodes to the same bytes. Integers decode as `Int` unless they exceed `i64::MAX`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    /// Shared with the frame it was decoded from (see [`decode_shared`]).
    Bin(Bytes),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    NdArray(NdArray),
    NpScalar(NpScalar),
}

impl Value {
    /// A map with str keys (what Python dicts of str keys encode to), in the given order.
    pub(crate) fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (Value::Str(k.into()), v))
                .collect(),
        )
    }

    /// The value under `key` in a map, whether the key arrived as str or as bin (clients differ,
    /// see the module doc); the last one when a key repeats, as a Python dict keeps it.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        let Value::Map(entries) = self else {
            return None;
        };
        entries
            .iter()
            .rev()
            .find(|(k, _)| k.is_key(key))
            .map(|(_, v)| v)
    }

    /// Whether this is `key` as str or as bin.
    pub(crate) fn is_key(&self, key: &str) -> bool {
        match self {
            Value::Str(s) => s == key,
            Value::Bin(b) => b == key.as_bytes(),
            _ => false,
        }
    }

    pub(crate) fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::NpScalar(s) => match s.value {
                Scalar::Bool(b) => Some(b),
                _ => None,
            },
            _ => None,
        }
    }

    /// An integer (a plain one or an integer numpy scalar) that fits i64.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        let wide = match self {
            Value::Int(v) => i128::from(*v),
            Value::UInt(v) => i128::from(*v),
            Value::NpScalar(s) => s.value.int()?,
            _ => return None,
        };
        i64::try_from(wide).ok()
    }

    /// A non-negative integer (a plain one or an integer numpy scalar) that fits u64: msgpack
    /// carries values from 2^63 up as uint 64, which [`Value::as_i64`] does not take.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Value::UInt(v) => Some(*v),
            Value::Int(v) => u64::try_from(*v).ok(),
            Value::NpScalar(s) => s.value.int().and_then(|w| u64::try_from(w).ok()),
            _ => None,
        }
    }

    /// A number as f64: a float, an integer, or a numeric numpy scalar.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(v) => Some(*v),
            Value::Int(v) => Some(*v as f64),
            Value::UInt(v) => Some(*v as f64),
            Value::NpScalar(s) if s.dtype != Dtype::Bool => Some(s.to_f64()),
            _ => None,
        }
    }

    /// A str, or a bin that is UTF-8.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            Value::Bin(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub(crate) fn as_map(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    pub(crate) fn as_ndarray(&self) -> Option<&NdArray> {
        match self {
            Value::NdArray(a) => Some(a),
            _ => None,
        }
    }

    /// The kind of value, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(true) => "true",
            Value::Bool(false) => "false",
            Value::Int(_) | Value::UInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bin(_) => "bin",
            Value::Array(_) => "array",
            Value::Map(_) => "map",
            Value::NdArray(_) => "ndarray",
            Value::NpScalar(_) => "numpy scalar",
        }
    }
}

/// `value.into()` for what actions are built from.
macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Value::$variant(v.into())
            }
        }
    )*};
}

value_from!(bool => Bool, i64 => Int, f64 => Float, &str => Str, String => Str,
    NdArray => NdArray, NpScalar => NpScalar);

/// The tags and field names of openpi's encoding (interface strings: they must match exactly).
const NDARRAY_TAG: &str = "__ndarray__";
const NPGENERIC_TAG: &str = "__npgeneric__";
const DATA: &str = "data";
const DTYPE: &str = "dtype";
const SHAPE: &str = "shape";

/// One msgpack frame → a [`Value`], with openpi's tagged maps turned into [`NdArray`]s and
/// [`NpScalar`]s, under [`Limits::DEFAULT`]. Binary data is copied out of `bytes`; a server that
/// owns the frame uses [`decode_shared`], which copies none.
pub(crate) fn decode(bytes: &[u8]) -> Result<Value, WireError> {
    decode_with(bytes, &Limits::DEFAULT)
}

/// [`decode`] under other limits.
pub(crate) fn decode_with(bytes: &[u8], limits: &Limits) -> Result<Value, WireError> {
    decode_from(bytes, None, limits)
}

/// [`decode`] of a frame held in [`Bytes`] (what the WebSocket hands over): every bin and array
/// in the result is a view of `frame`, not a copy. The server checks a later observation's
/// images without converting them; copying 3.4 MB into fresh pages per step was most of its
/// answer time.
pub(crate) fn decode_shared(frame: &Bytes, limits: &Limits) -> Result<Value, WireError> {
    decode_from(frame, Some(frame), limits)
}

fn decode_from(bytes: &[u8], shared: Option<&Bytes>, limits: &Limits) -> Result<Value, WireError> {
    if bytes.len() > limits.max_frame_bytes {
        return Err(WireError::FrameTooLarge {
            len: bytes.len(),
            max: limits.max_frame_bytes,
        });
    }
    let mut d = Decoder {
        buf: bytes,
        shared,
        pos: 0,
        limits,
        values: 0,
        payload: 0,
    };
    let v = d.value(0)?;
    let extra = bytes.len() - d.pos;
    if extra > 0 {
        return Err(WireError::TrailingBytes { extra });
    }
    Ok(v)
}

struct Decoder<'a> {
    buf: &'a [u8],
    /// `buf` itself when the caller owns it as [`Bytes`]: bins become views of it.
    shared: Option<&'a Bytes>,
    pos: usize,
    limits: &'a Limits,
    /// Values decoded so far.
    values: usize,
    /// Array data bytes accepted so far.
    payload: usize,
}

impl<'a> Decoder<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let left = self.left();
        if n > left {
            return Err(WireError::Truncated {
                at: self.pos,
                needed: n,
                left,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.bytes::<1>()?[0])
    }

    /// The big-endian length that follows a str, bin, array or map marker: 1, 2 or 4 bytes.
    fn len(&mut self, marker: Marker) -> Result<usize, WireError> {
        Ok(match marker {
            Marker::Str8 | Marker::Bin8 => self.u8()?.into(),
            Marker::Str16 | Marker::Bin16 | Marker::Array16 | Marker::Map16 => {
                u16::from_be_bytes(self.bytes()?).into()
            }
            // The 32-bit forms (Str32, Bin32, Array32, Map32). usize is at least 32 bits on every
            // target this crate builds for.
            _ => u32::from_be_bytes(self.bytes()?) as usize,
        })
    }

    fn value(&mut self, depth: usize) -> Result<Value, WireError> {
        self.values += 1;
        if self.values > self.limits.max_values {
            return Err(WireError::TooManyValues {
                max: self.limits.max_values,
            });
        }
        let at = self.pos;
        let marker = Marker::from_u8(self.u8()?);
        let v = match marker {
            Marker::FixPos(v) => Value::Int(v.into()),
            Marker::FixNeg(v) => Value::Int(v.into()),
            Marker::Null => Value::Nil,
            Marker::True => Value::Bool(true),
            Marker::False => Value::Bool(false),
            Marker::U8 => Value::Int(self.u8()?.into()),
            Marker::U16 => Value::Int(u16::from_be_bytes(self.bytes()?).into()),
            Marker::U32 => Value::Int(u32::from_be_bytes(self.bytes()?).into()),
            Marker::U64 => {
                let v = u64::from_be_bytes(self.bytes()?);
                i64::try_from(v).map_or(Value::UInt(v), Value::Int)
            }
            Marker::I8 => Value::Int(i8::from_be_bytes(self.bytes()?).into()),
            Marker::I16 => Value::Int(i16::from_be_bytes(self.bytes()?).into()),
            Marker::I32 => Value::Int(i32::from_be_bytes(self.bytes()?).into()),
            Marker::I64 => Value::Int(i64::from_be_bytes(self.bytes()?)),
            Marker::F32 => Value::Float(f32::from_be_bytes(self.bytes()?).into()),
            Marker::F64 => Value::Float(f64::from_be_bytes(self.bytes()?)),
            Marker::FixStr(n) => self.str(n.into())?,
            Marker::Str8 | Marker::Str16 | Marker::Str32 => {
                let n = self.len(marker)?;
                self.str(n)?
            }
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let n = self.len(marker)?;
                let data = self.take(n)?;
                Value::Bin(match self.shared {
                    Some(frame) => frame.slice_ref(data),
                    None => Bytes::copy_from_slice(data),
                })
            }
            Marker::FixArray(n) => self.array(n.into(), depth)?,
            Marker::Array16 | Marker::Array32 => {
                let n = self.len(marker)?;
                self.array(n, depth)?
            }
            Marker::FixMap(n) => self.map(n.into(), depth)?,
            Marker::Map16 | Marker::Map32 => {
                let n = self.len(marker)?;
                self.map(n, depth)?
            }
            Marker::FixExt1
            | Marker::FixExt2
            | Marker::FixExt4
            | Marker::FixExt8
            | Marker::FixExt16 => return Err(self.extension(at, 0)),
            Marker::Ext8 => return Err(self.extension(at, 1)),
            Marker::Ext16 => return Err(self.extension(at, 2)),
            Marker::Ext32 => return Err(self.extension(at, 4)),
            Marker::Reserved => return Err(WireError::ReservedMarker { at }),
        };
        Ok(v)
    }

    /// The error for an extension value whose type byte follows `len_bytes` length bytes.
    fn extension(&mut self, at: usize, len_bytes: usize) -> WireError {
        let ext_type = self
            .take(len_bytes)
            .and_then(|_| self.u8())
            .map(|t| t as i8);
        match ext_type {
            Ok(ext_type) => WireError::Extension { ext_type, at },
            Err(e) => e,
        }
    }

    fn str(&mut self, n: usize) -> Result<Value, WireError> {
        let at = self.pos;
        let bytes = self.take(n)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Value::Str(s.to_owned())),
            Err(_) => Err(WireError::InvalidUtf8 { at }),
        }
    }

    /// Room for `n` items of `per` values each (a map entry is two), checked before anything is
    /// allocated: every value takes at least a byte, so the declared count must fit in the bytes
    /// left, and under the value limit.
    fn reserve(&mut self, n: usize, per: usize, depth: usize) -> Result<usize, WireError> {
        if depth >= self.limits.max_depth {
            return Err(WireError::TooDeep {
                max: self.limits.max_depth,
            });
        }
        let needed = n.saturating_mul(per);
        let left = self.left();
        if needed > left {
            return Err(WireError::Truncated {
                at: self.pos,
                needed,
                left,
            });
        }
        if needed > self.limits.max_values.saturating_sub(self.values) {
            return Err(WireError::TooManyValues {
                max: self.limits.max_values,
            });
        }
        Ok(n)
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value, WireError> {
        let n = self.reserve(n, 1, depth)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value, WireError> {
        let n = self.reserve(n, 2, depth)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            entries.push((k, v));
        }
        // openpi's unpack_array tests the array tag first, then the scalar tag.
        if entries.iter().any(|(k, _)| k.is_key(NDARRAY_TAG)) {
            self.ndarray(entries).map(Value::NdArray)
        } else if entries.iter().any(|(k, _)| k.is_key(NPGENERIC_TAG)) {
            npscalar(entries).map(Value::NpScalar)
        } else {
            Ok(Value::Map(entries))
        }
    }

    /// A map tagged `__ndarray__` → the array it describes, checked. Fields beyond the four are
    /// ignored, as openpi ignores them.
    fn ndarray(&mut self, mut entries: Vec<(Value, Value)>) -> Result<NdArray, WireError> {
        const TAG: &str = NDARRAY_TAG;
        check_tag(&mut entries, TAG)?;
        let dtype = dtype_field(&mut entries, TAG)?;
        let shape = match take_field(&mut entries, TAG, SHAPE)? {
            Value::Array(dims) => dims,
            other => return Err(field_type(TAG, SHAPE, "an array of ints", &other)),
        };
        let dims: Vec<usize> = shape
            .iter()
            .map(|d| match d {
                Value::Int(v) => usize::try_from(*v).ok(),
                Value::UInt(v) => usize::try_from(*v).ok(),
                _ => None,
            })
            .collect::<Option<_>>()
            .ok_or_else(|| {
                let bad = shape
                    .iter()
                    .find(|d| !matches!(d, Value::Int(0..) | Value::UInt(_)));
                let found = match bad {
                    Some(Value::Int(_)) => "a negative int",
                    Some(other) => other.kind(),
                    None => "an int beyond the address space",
                };
                WireError::FieldType {
                    tag: TAG,
                    field: SHAPE,
                    expected: "an array of non-negative ints",
                    found,
                }
            })?;
        let data = match take_field(&mut entries, TAG, DATA)? {
            Value::Bin(b) => b,
            other => return Err(field_type(TAG, DATA, "bin", &other)),
        };
        let array = NdArray::checked(dtype, dims, data, self.limits.max_dims)?;
        self.payload = self.payload.saturating_add(array.data.len());
        if self.payload > self.limits.max_payload_bytes {
            return Err(WireError::PayloadTooLarge {
                bytes: self.payload,
                max: self.limits.max_payload_bytes,
            });
        }
        Ok(array)
    }
}

/// A map tagged `__npgeneric__` → the numpy scalar it describes.
fn npscalar(mut entries: Vec<(Value, Value)>) -> Result<NpScalar, WireError> {
    const TAG: &str = NPGENERIC_TAG;
    check_tag(&mut entries, TAG)?;
    let dtype = dtype_field(&mut entries, TAG)?;
    let value = match take_field(&mut entries, TAG, DATA)? {
        Value::Bool(b) => Scalar::Bool(b),
        Value::Int(v) => Scalar::Int(v),
        Value::UInt(v) => Scalar::UInt(v),
        Value::Float(v) => Scalar::Float(v),
        other => return Err(field_type(TAG, DATA, "a bool or a number", &other)),
    };
    NpScalar::new(dtype, value)
}

/// The tag must say `true`: openpi only tests that the key is present, but a map that says it is
/// not an array while carrying the tag is a sender's bug worth naming.
fn check_tag(entries: &mut Vec<(Value, Value)>, tag: &'static str) -> Result<(), WireError> {
    match take_field(entries, tag, tag)? {
        Value::Bool(true) => Ok(()),
        other => Err(field_type(tag, tag, "true", &other)),
    }
}

fn dtype_field(entries: &mut Vec<(Value, Value)>, tag: &'static str) -> Result<Dtype, WireError> {
    // numpy's np.dtype() takes bytes too, so openpi would accept a bin dtype.
    let v = take_field(entries, tag, DTYPE)?;
    match v.as_str() {
        Some(s) => Dtype::parse(s),
        None => Err(field_type(tag, DTYPE, "a str", &v)),
    }
}

/// Removes and returns the field `name` (the last one, as a Python dict keeps it).
fn take_field(
    entries: &mut Vec<(Value, Value)>,
    tag: &'static str,
    name: &'static str,
) -> Result<Value, WireError> {
    match entries.iter().rposition(|(k, _)| k.is_key(name)) {
        Some(i) => Ok(entries.swap_remove(i).1),
        None => Err(WireError::MissingField { tag, field: name }),
    }
}

fn field_type(
    tag: &'static str,
    field: &'static str,
    expected: &'static str,
    found: &Value,
) -> WireError {
    WireError::FieldType {
        tag,
        field,
        expected,
        found: found.kind(),
    }
}

/// A [`Value`] → one msgpack frame, as openpi's `packb` writes the same content: tagged maps with
/// bin keys in openpi's field order, the most compact int, str, bin, array and map headers, floats
/// as float64 (a value decoded from float32 is written back as float64, as Python would).
/// Fails only on a str, bin, array or map longer than msgpack's 2^32 - 1.
pub(crate) fn encode(value: &Value) -> Result<Vec<u8>, WireError> {
    // Room for the arrays' data up front: a frame of images is megabytes, grown by doubling it
    // would be copied several times over.
    let mut out = ByteBuf::with_capacity(array_bytes(value).saturating_add(1024));
    write_value(&mut out, value)?;
    Ok(out.into_vec())
}

/// The data bytes of every array and binary in `value` (what dominates its encoded size).
fn array_bytes(value: &Value) -> usize {
    match value {
        Value::NdArray(a) => a.data.len(),
        Value::Bin(b) => b.len(),
        Value::Array(items) => items.iter().map(array_bytes).sum(),
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| array_bytes(k) + array_bytes(v))
            .sum(),
        _ => 0,
    }
}

/// `ByteBuf` writes into a `Vec` and cannot fail: its error type is uninhabited.
fn ok<T>(r: Result<T, ValueWriteError<std::convert::Infallible>>) -> T {
    match r {
        Ok(v) => v,
        Err(ValueWriteError::InvalidMarkerWrite(e) | ValueWriteError::InvalidDataWrite(e)) => {
            match e {}
        }
    }
}

fn len32(what: &'static str, len: usize) -> Result<u32, WireError> {
    u32::try_from(len).map_err(|_| WireError::TooLong { what, len })
}

fn write_str(out: &mut ByteBuf, s: &str) -> Result<(), WireError> {
    ok(enc::write_str_len(out, len32("str", s.len())?));
    out.as_mut_vec().extend_from_slice(s.as_bytes());
    Ok(())
}

fn write_bin(out: &mut ByteBuf, b: &[u8]) -> Result<(), WireError> {
    ok(enc::write_bin_len(out, len32("bin", b.len())?));
    out.as_mut_vec().extend_from_slice(b);
    Ok(())
}

fn write_value(out: &mut ByteBuf, value: &Value) -> Result<(), WireError> {
    match value {
        Value::Nil => {
            let Ok(()) = enc::write_nil(out);
        }
        Value::Bool(b) => {
            let Ok(()) = enc::write_bool(out, *b);
        }
        Value::Int(v) => {
            ok(enc::write_sint(out, *v));
        }
        Value::UInt(v) => {
            ok(enc::write_uint(out, *v));
        }
        Value::Float(v) => ok(enc::write_f64(out, *v)),
        Value::Str(s) => write_str(out, s)?,
        Value::Bin(b) => write_bin(out, b)?,
        Value::Array(items) => {
            ok(enc::write_array_len(out, len32("array", items.len())?));
            for item in items {
                write_value(out, item)?;
            }
        }
        Value::Map(entries) => {
            ok(enc::write_map_len(out, len32("map", entries.len())?));
            for (k, v) in entries {
                write_value(out, k)?;
                write_value(out, v)?;
            }
        }
        Value::NdArray(a) => {
            ok(enc::write_map_len(out, 4));
            write_bin(out, NDARRAY_TAG.as_bytes())?;
            let Ok(()) = enc::write_bool(out, true);
            write_bin(out, DATA.as_bytes())?;
            write_bin(out, &a.data)?;
            write_bin(out, DTYPE.as_bytes())?;
            write_str(out, a.dtype.as_str())?;
            write_bin(out, SHAPE.as_bytes())?;
            ok(enc::write_array_len(out, len32("shape", a.shape.len())?));
            for &d in &a.shape {
                ok(enc::write_uint(out, d as u64));
            }
        }
        Value::NpScalar(s) => {
            ok(enc::write_map_len(out, 3));
            write_bin(out, NPGENERIC_TAG.as_bytes())?;
            let Ok(()) = enc::write_bool(out, true);
            write_bin(out, DATA.as_bytes())?;
            match s.value {
                Scalar::Bool(b) => {
                    let Ok(()) = enc::write_bool(out, b);
                }
                Scalar::Int(v) => {
                    ok(enc::write_sint(out, v));
                }
                Scalar::UInt(v) => {
                    ok(enc::write_uint(out, v));
                }
                Scalar::Float(v) => ok(enc::write_f64(out, v)),
            }
            write_bin(out, DTYPE.as_bytes())?;
            write_str(out, s.dtype.as_str())?;
        }
    }
    Ok(())
}
