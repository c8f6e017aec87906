//! A bounded reader of JFR files: chunks, their metadata (the classes and
//! fields of every type), constant pools and events, decoded only as far as
//! the converter asks.
//!
//! A `.jfr` file is a sequence of chunks. A chunk starts with a 68-byte
//! header (magic `FLR\0`, version, size, the offsets of its last constant
//! pool and of its metadata, start time, start ticks, tick rate, features)
//! followed by events: each is its size, its type id and its fields in the
//! order its class lists them. Type 0 is the metadata event, type 1 a
//! checkpoint (constant pools; each points back to the one before it).
//! Integers are LEB128-like varints when the chunk's features say so
//! ("compressed integers", every JDK since 14), big-endian otherwise.
//!
//! Invariant: every length, count and offset read from the file is checked
//! against the bytes that remain before it is used, so nothing is allocated
//! that the input does not hold, nothing loops longer than the input, and
//! recursion is bounded; any damage is an [`Error`], never a panic. Memory:
//! one chunk's bytes, its classes, and one offset per constant-pool entry
//! (values are decoded when they are looked at).

use rustc_hash::FxHashMap;
use std::io::{Read, Seek, SeekFrom};

/// Why a chunk or an event could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the input failed.
    #[error("read error: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not what the format allows here.
    #[error("{what} at byte {offset} of the chunk")]
    Format {
        /// What was wrong.
        what: &'static str,
        /// Where, from the chunk's start.
        offset: usize,
    },
}

type Result<T> = std::result::Result<T, Error>;

/// Bytes of a chunk header.
const HEADER_BYTES: usize = 68;
/// The largest chunk read (the JVM rotates at 12 MiB by default).
const MAX_CHUNK_BYTES: u64 = 1 << 30;
/// Deepest nesting of inline objects, and of metadata elements.
const MAX_DEPTH: u32 = 32;
/// Event type ids of the metadata and checkpoint events.
const METADATA: i64 = 0;
const CHECKPOINT: i64 = 1;

/// A chunk's header, as far as times are concerned.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    /// Bytes of the chunk, header included.
    pub size: u64,
    /// Wall-clock start, ns since the epoch.
    pub start_time_nanos: i64,
    /// How long the chunk covers, ns.
    pub duration_nanos: i64,
    /// The JVM's tick counter at the start.
    pub start_ticks: i64,
    /// Ticks per second.
    pub ticks_per_second: i64,
}

/// Reads the chunks of a JFR file one at a time.
#[derive(Debug)]
pub struct Chunks<R> {
    input: R,
    at: u64,
    len: u64,
}

impl<R: Read + Seek> Chunks<R> {
    /// Reads `input`, `len` bytes long.
    pub fn new(input: R, len: u64) -> Self {
        Chunks { input, at: 0, len }
    }

    /// The next chunk; `None` at the end of the input.
    pub fn next_chunk(&mut self) -> Option<Result<Chunk>> {
        if self.at >= self.len {
            return None;
        }
        Some(self.read_chunk())
    }

    fn read_chunk(&mut self) -> Result<Chunk> {
        let left = self.len - self.at;
        // On any error the rest of the file is given up.
        let start = self.at;
        self.at = self.len;
        if left < HEADER_BYTES as u64 {
            return Err(format_error("a chunk header cut short", 0));
        }
        self.input.seek(SeekFrom::Start(start))?;
        let mut head = [0u8; HEADER_BYTES];
        self.input.read_exact(&mut head)?;
        if &head[..4] != b"FLR\0" {
            return Err(format_error("no chunk magic", 0));
        }
        let major = u16::from_be_bytes([head[4], head[5]]);
        if !(1..=2).contains(&major) {
            return Err(format_error("an unknown format version", 4));
        }
        let size = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
        if size < HEADER_BYTES as u64 || size > left || size > MAX_CHUNK_BYTES {
            return Err(format_error("a chunk size beyond the file", 8));
        }
        let mut bytes = vec![0u8; size as usize];
        bytes[..HEADER_BYTES].copy_from_slice(&head);
        self.input.read_exact(&mut bytes[HEADER_BYTES..])?;
        self.at = start + size;
        Chunk::parse(bytes)
    }
}

fn format_error(what: &'static str, offset: usize) -> Error {
    Error::Format { what, offset }
}

/// A class of the chunk's metadata.
#[derive(Debug, Default)]
struct Class {
    id: i64,
    name: String,
    fields: Vec<Field>,
    /// How its values are encoded, from its name.
    primitive: Option<Primitive>,
}

/// A field of a class.
#[derive(Debug, Default)]
struct Field {
    name: String,
    class: i64,
    /// Stored as a constant-pool index.
    pooled: bool,
    /// An array of its class.
    array: bool,
}

/// The encodings of JFR's primitive classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Primitive {
    Boolean,
    Byte,
    Char,
    Short,
    Int,
    Long,
    Float,
    Double,
    String,
}

impl Primitive {
    fn of(class_name: &str) -> Option<Primitive> {
        Some(match class_name {
            "boolean" => Primitive::Boolean,
            "byte" => Primitive::Byte,
            "char" => Primitive::Char,
            "short" => Primitive::Short,
            "int" => Primitive::Int,
            "long" => Primitive::Long,
            "float" => Primitive::Float,
            "double" => Primitive::Double,
            "java.lang.String" => Primitive::String,
            _ => return None,
        })
    }
}

/// A decoded value. Constant-pool references stay references until an
/// [`Access`] follows them.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Ref { class: i64, index: i64 },
    Object { class: usize, fields: Vec<Value> },
    Array(Vec<Value>),
}

/// One chunk, its metadata and where its constant-pool entries are.
#[derive(Debug)]
pub struct Chunk {
    /// Its header.
    pub header: Header,
    bytes: Vec<u8>,
    compressed: bool,
    classes: Vec<Class>,
    by_id: FxHashMap<i64, usize>,
    /// (class id, index) → offset of the entry's value.
    pool: FxHashMap<(i64, i64), u32>,
}

impl Chunk {
    fn parse(bytes: Vec<u8>) -> Result<Chunk> {
        let be = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let header = Header {
            size: bytes.len() as u64,
            start_time_nanos: be(32),
            duration_nanos: be(40),
            start_ticks: be(48),
            ticks_per_second: be(56),
        };
        let cp_offset = be(16);
        let meta_offset = be(24);
        let features = u32::from_be_bytes(bytes[64..68].try_into().expect("4 bytes"));
        let mut chunk = Chunk {
            header,
            bytes,
            compressed: features & 1 != 0,
            classes: Vec::new(),
            by_id: FxHashMap::default(),
            pool: FxHashMap::default(),
        };
        chunk.read_metadata(offset_in(&chunk.bytes, meta_offset)?)?;
        chunk.read_pools(cp_offset)?;
        Ok(chunk)
    }

    fn cursor(&self, at: usize) -> Cursor<'_> {
        Cursor {
            bytes: &self.bytes,
            at,
            compressed: self.compressed,
        }
    }

    /// The metadata event: a string table, then a tree of elements whose
    /// `class` elements (under `metadata`) hold `field` elements.
    fn read_metadata(&mut self, at: usize) -> Result<()> {
        let mut c = self.cursor(at);
        let (_, kind) = c.event_header()?;
        if kind != METADATA {
            return Err(format_error("no metadata event at its offset", at));
        }
        c.long()?; // start
        c.long()?; // duration
        c.long()?; // metadata id
        let count = c.count()?;
        let mut strings = Vec::with_capacity(count);
        for _ in 0..count {
            strings.push(match c.string_value()? {
                Value::Str(s) => s,
                _ => String::new(),
            });
        }
        c.int()?; // the root element's name
        let mut classes = Vec::new();
        c.element(&strings, Element::Root, 0, &mut classes)?;
        for class in &mut classes {
            class.primitive = Primitive::of(&class.name);
        }
        self.by_id = classes.iter().enumerate().map(|(i, k)| (k.id, i)).collect();
        self.classes = classes;
        Ok(())
    }

    /// Walks the checkpoints back from the last one, noting where each
    /// constant-pool entry's value lies.
    fn read_pools(&mut self, first: i64) -> Result<()> {
        let mut at = offset_in(&self.bytes, first)?;
        let mut pool = FxHashMap::default();
        loop {
            let mut c = self.cursor(at);
            let (_, kind) = c.event_header()?;
            if kind != CHECKPOINT {
                return Err(format_error("no checkpoint event at its offset", at));
            }
            c.long()?; // start
            c.long()?; // duration
            let delta = c.long()?;
            c.byte()?; // checkpoint kind (flush, …)
            let pools = c.count()?;
            for _ in 0..pools {
                let class = c.long()?;
                let k = self.class_index(class, c.at)?;
                let entries = c.count()?;
                for _ in 0..entries {
                    let index = c.long()?;
                    let value_at = c.at;
                    self.skip_value(&mut c, k, 0)?;
                    // The newest definition wins: checkpoints are walked
                    // from the last.
                    pool.entry((class, index)).or_insert(value_at as u32);
                }
            }
            if delta == 0 {
                break;
            }
            // Each checkpoint points to an earlier one.
            let next = i64::try_from(at)
                .ok()
                .and_then(|a| a.checked_add(delta))
                .filter(|&n| delta < 0 && n >= HEADER_BYTES as i64)
                .ok_or(format_error("a checkpoint that does not point back", at))?;
            at = next as usize;
        }
        self.pool = pool;
        Ok(())
    }

    fn class_index(&self, id: i64, at: usize) -> Result<usize> {
        self.by_id
            .get(&id)
            .copied()
            .ok_or(format_error("an unknown class", at))
    }

    /// Decodes one value of class `k` (not through the pool).
    fn read_value(&self, c: &mut Cursor<'_>, k: usize, depth: u32) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(format_error("objects nested too deep", c.at));
        }
        let class = &self.classes[k];
        if let Some(p) = class.primitive {
            return c.primitive(p, class.id);
        }
        let mut fields = Vec::with_capacity(class.fields.len().min(c.left()));
        for f in &class.fields {
            let v = if f.array {
                let n = c.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let before = c.at;
                    items.push(self.read_field(c, f, depth)?);
                    if c.at == before {
                        return Err(format_error("an array of empty elements", c.at));
                    }
                }
                Value::Array(items)
            } else {
                self.read_field(c, f, depth)?
            };
            fields.push(v);
        }
        Ok(Value::Object { class: k, fields })
    }

    fn read_field(&self, c: &mut Cursor<'_>, f: &Field, depth: u32) -> Result<Value> {
        if f.pooled {
            return Ok(Value::Ref {
                class: f.class,
                index: c.long()?,
            });
        }
        let k = self.class_index(f.class, c.at)?;
        self.read_value(c, k, depth + 1)
    }

    /// Moves past one value of class `k`.
    fn skip_value(&self, c: &mut Cursor<'_>, k: usize, depth: u32) -> Result<()> {
        // Decoding is as cheap as skipping for the sizes JFR writes.
        self.read_value(c, k, depth).map(drop)
    }

    /// The value of pool entry (`class`, `index`), if the chunk has it.
    fn pooled(&self, class: i64, index: i64) -> Option<Value> {
        let at = *self.pool.get(&(class, index))?;
        let k = *self.by_id.get(&class)?;
        self.read_value(&mut self.cursor(at as usize), k, 0).ok()
    }

    /// The chunk's events, in file order (metadata and checkpoints left out).
    pub fn events(&self) -> Events<'_> {
        Events {
            chunk: self,
            at: HEADER_BYTES,
            seen: 0,
        }
    }
}

/// `offset` as an index into `bytes`, if it points inside past the header.
fn offset_in(bytes: &[u8], offset: i64) -> Result<usize> {
    usize::try_from(offset)
        .ok()
        .filter(|&o| o >= HEADER_BYTES && o < bytes.len())
        .ok_or(format_error("an offset outside the chunk", 16))
}

/// Metadata elements that matter, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    Root,
    Metadata,
    Class,
    Field,
    Other,
}

/// A position in a chunk's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    compressed: bool,
}

impl Cursor<'_> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.left() {
            return Err(format_error(
                "a value cut short by the chunk's end",
                self.at,
            ));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// A compressed integer: 7 bits a byte, low first, the 9th byte whole.
    fn varint(&mut self) -> Result<i64> {
        let mut v: u64 = 0;
        for i in 0..8 {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v as i64);
            }
        }
        Ok((v | (u64::from(self.byte()?) << 56)) as i64)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn long(&mut self) -> Result<i64> {
        if self.compressed {
            self.varint()
        } else {
            Ok(i64::from_be_bytes(self.fixed()?))
        }
    }

    fn int(&mut self) -> Result<i32> {
        if self.compressed {
            Ok(self.varint()? as i32)
        } else {
            Ok(i32::from_be_bytes(self.fixed()?))
        }
    }

    fn short(&mut self) -> Result<i16> {
        if self.compressed {
            Ok(self.varint()? as i16)
        } else {
            Ok(i16::from_be_bytes(self.fixed()?))
        }
    }

    /// A count of things that each take a byte or more: never more than
    /// the bytes left.
    fn count(&mut self) -> Result<usize> {
        let at = self.at;
        usize::try_from(self.int()?)
            .ok()
            .filter(|&n| n <= self.left())
            .ok_or(format_error("a count beyond the chunk's end", at))
    }

    /// An event's size and type; the size must fit the chunk.
    fn event_header(&mut self) -> Result<(usize, i64)> {
        let start = self.at;
        let size = usize::try_from(self.int()?)
            .ok()
            .filter(|&s| s > 0 && s <= self.bytes.len() - start)
            .ok_or(format_error("an event size beyond the chunk's end", start))?;
        let kind = self.long()?;
        if self.at > start + size {
            return Err(format_error("an event smaller than its header", start));
        }
        Ok((start + size, kind))
    }

    /// A string in any of JFR's encodings; pooled ones as a reference to
    /// the pool of class `string_class`.
    fn string(&mut self, string_class: i64) -> Result<Value> {
        let at = self.at;
        Ok(match self.byte()? {
            0 => Value::Null,
            1 => Value::Str(String::new()),
            2 => Value::Ref {
                class: string_class,
                index: self.long()?,
            },
            3 => {
                let n = self.count()?;
                Value::Str(String::from_utf8_lossy(self.take(n)?).into_owned())
            }
            4 => {
                let n = self.count()?;
                let mut s = String::with_capacity(n);
                for _ in 0..n {
                    let c = if self.compressed {
                        self.varint()?
                    } else {
                        i64::from(u16::from_be_bytes(self.fixed()?))
                    };
                    s.push(
                        u32::try_from(c)
                            .ok()
                            .and_then(char::from_u32)
                            .unwrap_or('\u{fffd}'),
                    );
                }
                Value::Str(s)
            }
            5 => {
                let n = self.count()?;
                Value::Str(self.take(n)?.iter().map(|&b| char::from(b)).collect())
            }
            _ => return Err(format_error("an unknown string encoding", at)),
        })
    }

    /// A metadata string (never pooled).
    fn string_value(&mut self) -> Result<Value> {
        self.string(-1)
    }

    fn primitive(&mut self, p: Primitive, class: i64) -> Result<Value> {
        Ok(match p {
            Primitive::Boolean => Value::Bool(self.byte()? != 0),
            Primitive::Byte => Value::Int(i64::from(self.byte()? as i8)),
            Primitive::Char => Value::Int(i64::from(self.short()? as u16)),
            Primitive::Short => Value::Int(i64::from(self.short()?)),
            Primitive::Int => Value::Int(i64::from(self.int()?)),
            Primitive::Long => Value::Int(self.long()?),
            Primitive::Float => Value::Float(f64::from(f32::from_be_bytes(self.fixed()?))),
            Primitive::Double => Value::Float(f64::from_be_bytes(self.fixed()?)),
            Primitive::String => self.string(class)?,
        })
    }

    /// One metadata element: attributes, then children; classes and their
    /// fields are collected into `classes`.
    fn element(
        &mut self,
        strings: &[String],
        kind: Element,
        depth: u32,
        classes: &mut Vec<Class>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(format_error("metadata nested too deep", self.at));
        }
        let text = |c: &mut Self| -> Result<&str> {
            let at = c.at;
            let i = c.int()?;
            usize::try_from(i)
                .ok()
                .and_then(|i| strings.get(i))
                .map(String::as_str)
                .ok_or(format_error("a metadata string out of range", at))
        };
        let mut class = Class::default();
        let mut field = Field::default();
        let attributes = self.count()?;
        for _ in 0..attributes {
            let key = text(self)?;
            let value = text(self)?;
            match (kind, key) {
                (Element::Class, "id") => class.id = value.parse().unwrap_or(-1),
                (Element::Class, "name") => class.name = value.to_string(),
                (Element::Field, "name") => field.name = value.to_string(),
                (Element::Field, "class") => field.class = value.parse().unwrap_or(-1),
                (Element::Field, "constantPool") => field.pooled = value == "true",
                (Element::Field, "dimension") => field.array = value == "1",
                _ => {}
            }
        }
        if kind == Element::Class {
            classes.push(class);
        }
        let children = self.count()?;
        for _ in 0..children {
            let child = match (kind, text(self)?) {
                (Element::Root, "metadata") => Element::Metadata,
                (Element::Metadata, "class") => Element::Class,
                (Element::Class, "field") => Element::Field,
                _ => Element::Other,
            };
            self.element(strings, child, depth + 1, classes)?;
        }
        if kind == Element::Field {
            if let Some(owner) = classes.last_mut() {
                owner.fields.push(field);
            }
        }
        Ok(())
    }
}

/// The events of a chunk.
#[derive(Debug)]
pub struct Events<'c> {
    chunk: &'c Chunk,
    at: usize,
    seen: u64,
}

/// One event: its class's name and its value.
#[derive(Debug)]
pub struct Event<'c> {
    /// The event's class, e.g. `jdk.ThreadPark`.
    pub class_name: &'c str,
    /// Its fields.
    pub value: Access<'c>,
}

impl<'c> Events<'c> {
    /// Events passed so far, wanted or not.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The next event whose class name `wanted` accepts, decoded; the
    /// others are only skipped over.
    pub fn next_where(&mut self, wanted: impl Fn(&str) -> bool) -> Option<Result<Event<'c>>> {
        let chunk = self.chunk;
        while self.at < chunk.bytes.len() {
            let mut c = chunk.cursor(self.at);
            let (end, kind) = match c.event_header() {
                Ok(h) => h,
                Err(e) => {
                    self.at = chunk.bytes.len();
                    return Some(Err(e));
                }
            };
            self.at = end;
            if kind == METADATA || kind == CHECKPOINT {
                continue;
            }
            let Some(&k) = chunk.by_id.get(&kind) else {
                self.at = chunk.bytes.len();
                return Some(Err(format_error("an event of an unknown class", c.at)));
            };
            self.seen += 1;
            let name = chunk.classes[k].name.as_str();
            if !wanted(name) {
                continue;
            }
            // Its fields lie within its own size.
            let mut body = Cursor {
                bytes: &chunk.bytes[..end],
                at: c.at,
                compressed: chunk.compressed,
            };
            return Some(match chunk.read_value(&mut body, k, 0) {
                Ok(value) => Ok(Event {
                    class_name: name,
                    value: Access { chunk, value },
                }),
                Err(e) => Err(e),
            });
        }
        None
    }
}

/// A value of a chunk, with what it takes to follow its references.
#[derive(Debug, Clone)]
pub struct Access<'c> {
    chunk: &'c Chunk,
    value: Value,
}

impl<'c> Access<'c> {
    fn of(&self, value: Value) -> Access<'c> {
        Access {
            chunk: self.chunk,
            value,
        }
    }

    /// The value, a constant-pool reference followed.
    fn resolved(&self) -> Option<Value> {
        match &self.value {
            Value::Ref { class, index } => self.chunk.pooled(*class, *index),
            v => Some(v.clone()),
        }
    }

    /// Field `name`'s raw value (a reference stays one).
    fn raw_field(&self, name: &str) -> Option<Value> {
        let pick = |class: usize, fields: &[Value]| {
            let i = self.chunk.classes[class]
                .fields
                .iter()
                .position(|f| f.name == name)?;
            fields.get(i).cloned()
        };
        match &self.value {
            Value::Object { class, fields } => pick(*class, fields),
            Value::Ref { .. } => match self.resolved()? {
                Value::Object { class, fields } => pick(class, &fields),
                _ => None,
            },
            _ => None,
        }
    }

    /// Field `name` of this object, references followed; `None` if it has
    /// no such field or a reference leads nowhere.
    pub fn field(&self, name: &str) -> Option<Access<'c>> {
        let v = self.of(self.raw_field(name)?);
        Some(self.of(v.resolved()?))
    }

    /// The constant-pool key of field `name`, if it is a reference (equal
    /// keys in one chunk are the same value).
    pub fn field_key(&self, name: &str) -> Option<(i64, i64)> {
        match self.raw_field(name)? {
            Value::Ref { class, index } => Some((class, index)),
            _ => None,
        }
    }

    /// An integer.
    pub fn long(&self) -> Option<i64> {
        match self.value {
            Value::Int(v) => Some(v),
            _ => None,
        }
    }

    /// A boolean.
    pub fn bool(&self) -> Option<bool> {
        match self.value {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string, or a symbol (an object whose `string` field holds one).
    pub fn string(&self) -> Option<String> {
        self.string_within(4)
    }

    /// [`Access::string`] through at most `depth` symbols (a damaged
    /// file's symbol may hold itself).
    fn string_within(&self, depth: u32) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Object { .. } if depth > 0 => self.field("string")?.string_within(depth - 1),
            _ => None,
        }
    }

    /// An array's elements, references followed.
    pub fn elements(&self) -> Vec<Access<'c>> {
        match &self.value {
            Value::Array(items) => items
                .iter()
                .filter_map(|v| self.of(v.clone()).resolved().map(|r| self.of(r)))
                .collect(),
            _ => Vec::new(),
        }
    }
}
