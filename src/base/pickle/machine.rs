//! The pickle stack machine: opcodes in, inert values out. A global is a name and nothing more;
//! `REDUCE`, `NEWOBJ` and `BUILD` are interpreted only for the allowed globals (`allowed`), and
//! in an error column, for an exception class, by recording its name and arguments.
//!
//! Every opcode pushes at most one value, and containers live in one arena (shared by index,
//! as the memo shares them in Python), so memory grows with the input and never with what a
//! shared reference would expand to: that is counted when converting (`super::Convert`).

use std::collections::HashMap;
use std::rc::Rc;

use super::types::{self, latin1, opcode_name, Int, TextKind};
use crate::error::Refusal;

/// A decoded value. Containers are [`Obj`]s in the arena, named by index.
#[derive(Debug, Clone)]
pub(super) enum Py {
    None,
    Bool(bool),
    Int(Int),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    /// A date, datetime, Decimal or UUID, already as its JSON text.
    Text(TextKind, Rc<str>),
    /// A class or function named by `GLOBAL`/`STACK_GLOBAL`: a name, never resolved.
    Global(Rc<Global>),
    /// `datetime.timedelta`, in microseconds (only a time zone's offset uses it).
    Timedelta(i128),
    /// `datetime.timezone` with this UTC offset in microseconds.
    Tz(i64),
    Obj(usize),
}

/// A mutable or shared value: what the memo and `APPEND`/`SETITEM`/`BUILD` refer to.
#[derive(Debug)]
pub(super) enum Obj {
    List(Vec<Py>),
    Tuple(Vec<Py>),
    Dict(Vec<(Py, Py)>),
    Set(Vec<Py>),
    /// `uuid.UUID.__new__(UUID)`, waiting for the `BUILD` that gives it its `int`.
    NewUuid,
    /// A UUID once built (replaced in place, so memo references see it).
    Text(TextKind, Rc<str>),
    /// An exception in an error column: its class name and arguments, never instantiated.
    Exception {
        name: String,
        args: Vec<Py>,
    },
}

/// A global as the pickle wrote it (`module`, `name`) and the allow-list's reading of it.
#[derive(Debug)]
pub(super) struct Global {
    pub module: String,
    pub name: String,
    /// The Python 3 module (`__builtin__` and `exceptions` are `builtins`).
    canonical: &'static str,
}

/// The classes and functions whose pickles are plain data, by Python 3 module and name.
const ALLOWED: &[(&str, &str)] = &[
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "bytearray"),
    ("builtins", "bytes"),
    ("_codecs", "encode"),
    ("collections", "OrderedDict"),
    ("datetime", "datetime"),
    ("datetime", "date"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("decimal", "Decimal"),
    ("uuid", "UUID"),
];

impl Global {
    fn new(module: String, name: String) -> Global {
        let canonical = match module.as_str() {
            "__builtin__" | "exceptions" | "builtins" => "builtins",
            _ => ALLOWED
                .iter()
                .find(|(m, _)| *m == module)
                .map_or("", |(m, _)| m),
        };
        Global {
            module,
            name,
            canonical,
        }
    }

    fn is(&self, module: &str, name: &str) -> bool {
        self.canonical == module && self.name == name
    }

    fn allowed(&self) -> bool {
        ALLOWED.iter().any(|(m, n)| self.is(m, n))
    }

    pub(super) fn refusal(&self) -> Refusal {
        Refusal::UnsupportedGlobal {
            module: self.module.clone(),
            name: self.name.clone(),
        }
    }
}

fn malformed(why: impl Into<String>) -> Refusal {
    Refusal::Malformed(why.into())
}

/// The decoder's state over one pickle.
pub(super) struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Py>,
    marks: Vec<usize>,
    memo: HashMap<u32, Py>,
    pub(super) arena: Vec<Obj>,
    /// An error column: any global may name an exception class.
    errors: bool,
    /// Values copied so far (a set built from a list, a call's arguments): a memoized
    /// container copied again and again must stop, as its expansion does (`super::MAX_NODES`).
    copied: usize,
}

impl<'a> Machine<'a> {
    pub(super) fn new(data: &'a [u8], errors: bool) -> Machine<'a> {
        Machine {
            data,
            pos: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            arena: Vec::new(),
            errors,
            copied: 0,
        }
    }

    /// Counts `items` just copied against the copy budget (one copy past it is at most one
    /// container's size, itself bounded by the input).
    fn copied(&mut self, items: Vec<Py>) -> Result<Vec<Py>, Refusal> {
        self.copied = self.copied.saturating_add(items.len());
        if self.copied > super::MAX_NODES {
            return Err(Refusal::TooLarge(format!(
                "more than {} values copied while decoding",
                super::MAX_NODES
            )));
        }
        Ok(items)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Refusal> {
        let data = self.data;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= data.len())
            .ok_or_else(|| malformed(format!("truncated at byte {}", self.pos)))?;
        let bytes = &data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Refusal> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, Refusal> {
        Ok(self.array::<1>()?[0])
    }

    fn len_u32(&mut self) -> Result<usize, Refusal> {
        Ok(u32::from_le_bytes(self.array()?) as usize)
    }

    fn len_u64(&mut self) -> Result<usize, Refusal> {
        usize::try_from(u64::from_le_bytes(self.array()?))
            .map_err(|_| malformed("a length past the input"))
    }

    fn push(&mut self, v: Py) {
        self.stack.push(v);
    }

    fn new_obj(&mut self, obj: Obj) -> Py {
        self.arena.push(obj);
        Py::Obj(self.arena.len() - 1)
    }

    fn pop(&mut self) -> Result<Py, Refusal> {
        if self.marks.last().is_some_and(|&m| self.stack.len() <= m) {
            return Err(malformed("a pop past a MARK"));
        }
        self.stack.pop().ok_or_else(|| malformed("stack underflow"))
    }

    fn pop_mark(&mut self) -> Result<Vec<Py>, Refusal> {
        let mark = self.marks.pop().ok_or_else(|| malformed("no MARK"))?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    fn top(&self) -> Result<&Py, Refusal> {
        self.stack
            .last()
            .ok_or_else(|| malformed("stack underflow"))
    }

    /// The arena object on top of the stack, for `APPEND`, `SETITEM`, `ADDITEMS`, `BUILD`.
    fn top_obj(&mut self) -> Result<&mut Obj, Refusal> {
        match self.stack.last() {
            Some(Py::Obj(i)) => Ok(&mut self.arena[*i]),
            _ => Err(malformed("no container on the stack")),
        }
    }

    fn str(&mut self, n: usize) -> Result<Py, Refusal> {
        let bytes = self.take(n)?;
        let text = std::str::from_utf8(bytes)
            .map_err(|_| Refusal::UnsupportedValue("a str with lone surrogates".into()))?;
        Ok(Py::Str(text.into()))
    }

    fn line(&mut self) -> Result<String, Refusal> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| malformed("GLOBAL without its newline"))?;
        let text = std::str::from_utf8(&rest[..end])
            .map_err(|_| malformed("GLOBAL with a name that is not UTF-8"))?
            .to_owned();
        self.pos += end + 1;
        Ok(text)
    }

    fn global(&self, module: String, name: String) -> Result<Py, Refusal> {
        let g = Global::new(module, name);
        if !g.allowed() && !self.errors {
            return Err(g.refusal());
        }
        Ok(Py::Global(Rc::new(g)))
    }

    /// The items of a tuple on the stack (`REDUCE`'s and `NEWOBJ`'s arguments).
    fn tuple_items(&mut self, v: &Py) -> Result<Vec<Py>, Refusal> {
        let items = match v {
            Py::Obj(i) => match &self.arena[*i] {
                Obj::Tuple(items) => items.clone(),
                _ => return Err(malformed("arguments that are not a tuple")),
            },
            _ => return Err(malformed("arguments that are not a tuple")),
        };
        self.copied(items)
    }

    /// Runs to `STOP`; the value on top of the stack then.
    pub(super) fn run(&mut self) -> Result<Py, Refusal> {
        loop {
            let op = self.byte()?;
            match op {
                0x80 => {
                    if self.byte()? > 5 {
                        return Err(Refusal::UnsupportedProtocol);
                    }
                }
                0x95 => drop(self.take(8)?), // FRAME: a hint for buffered readers
                b'.' => {
                    if self.pos != self.data.len() {
                        return Err(malformed("bytes after STOP"));
                    }
                    return self.pop();
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    if self.marks.last() == Some(&self.stack.len()) {
                        self.pop_mark()?;
                    } else {
                        self.pop()?;
                    }
                }
                b'1' => drop(self.pop_mark()?),
                b'2' => {
                    let top = self.top()?.clone();
                    self.push(top);
                }
                0x94 => {
                    let top = self.top()?.clone();
                    let key = u32::try_from(self.memo.len()).map_err(|_| malformed("memo"))?;
                    self.memo.insert(key, top);
                }
                b'q' | b'r' => {
                    let key = match op {
                        b'q' => u32::from(self.byte()?),
                        _ => u32::from_le_bytes(self.array()?),
                    };
                    let top = self.top()?.clone();
                    self.memo.insert(key, top);
                }
                b'h' | b'j' => {
                    let key = match op {
                        b'h' => u32::from(self.byte()?),
                        _ => u32::from_le_bytes(self.array()?),
                    };
                    let v = self.memo.get(&key).cloned();
                    self.push(v.ok_or_else(|| malformed(format!("memo {key} read unset")))?);
                }
                b'N' => self.push(Py::None),
                0x88 => self.push(Py::Bool(true)),
                0x89 => self.push(Py::Bool(false)),
                b'J' | b'K' | b'M' => {
                    let n = match op {
                        b'J' => i32::from_le_bytes(self.array()?),
                        b'K' => i32::from(self.byte()?),
                        _ => i32::from(u16::from_le_bytes(self.array()?)),
                    };
                    self.push(Py::Int(Int::from(n)));
                }
                0x8a | 0x8b => {
                    let n = match op {
                        0x8a => usize::from(self.byte()?),
                        _ => usize::try_from(i32::from_le_bytes(self.array()?))
                            .map_err(|_| malformed("LONG4 of negative length"))?,
                    };
                    let bytes = self.take(n)?;
                    self.push(Py::Int(Int::from_le_signed(bytes)?));
                }
                b'G' => {
                    let f = f64::from_be_bytes(self.array()?);
                    self.push(Py::Float(f));
                }
                0x8c => {
                    let n = usize::from(self.byte()?);
                    let s = self.str(n)?;
                    self.push(s);
                }
                b'X' => {
                    let n = self.len_u32()?;
                    let s = self.str(n)?;
                    self.push(s);
                }
                0x8d => {
                    let n = self.len_u64()?;
                    let s = self.str(n)?;
                    self.push(s);
                }
                b'C' | b'B' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => usize::from(self.byte()?),
                        b'B' => self.len_u32()?,
                        _ => self.len_u64()?,
                    };
                    let bytes = self.take(n)?;
                    self.push(Py::Bytes(bytes.into()));
                }
                b')' | b']' | b'}' | 0x8f => {
                    let empty = match op {
                        b')' => Obj::Tuple(Vec::new()),
                        b']' => Obj::List(Vec::new()),
                        b'}' => Obj::Dict(Vec::new()),
                        _ => Obj::Set(Vec::new()),
                    };
                    let v = self.new_obj(empty);
                    self.push(v);
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n + self.marks.last().copied().unwrap_or(0) {
                        return Err(malformed("stack underflow"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let t = self.new_obj(Obj::Tuple(items));
                    self.push(t);
                }
                b't' | b'l' | 0x91 => {
                    let items = self.pop_mark()?;
                    let obj = match op {
                        b't' => Obj::Tuple(items),
                        b'l' => Obj::List(items),
                        _ => Obj::Set(items),
                    };
                    let v = self.new_obj(obj);
                    self.push(v);
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let v = self.new_obj(Obj::Dict(pairs(items)?));
                    self.push(v);
                }
                b'a' => {
                    let v = self.pop()?;
                    match self.top_obj()? {
                        Obj::List(items) => items.push(v),
                        _ => return Err(malformed("APPEND to something not a list")),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    match self.top_obj()? {
                        Obj::List(list) => list.extend(items),
                        _ => return Err(malformed("APPENDS to something not a list")),
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    match self.top_obj()? {
                        Obj::Dict(d) => d.push((k, v)),
                        _ => return Err(malformed("SETITEM on something not a dict")),
                    }
                }
                b'u' => {
                    let items = pairs(self.pop_mark()?)?;
                    match self.top_obj()? {
                        Obj::Dict(d) => d.extend(items),
                        _ => return Err(malformed("SETITEMS on something not a dict")),
                    }
                }
                0x90 => {
                    let items = self.pop_mark()?;
                    match self.top_obj()? {
                        Obj::Set(s) => s.extend(items),
                        _ => return Err(malformed("ADDITEMS to something not a set")),
                    }
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = self.global(module, name)?;
                    self.push(g);
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Py::Str(module), Py::Str(name)) = (module, name) else {
                        return Err(malformed("STACK_GLOBAL of names that are not str"));
                    };
                    let g = self.global(module.to_string(), name.to_string())?;
                    self.push(g);
                }
                b'R' => {
                    let args = self.pop()?;
                    let f = self.pop()?;
                    let args = self.tuple_items(&args)?;
                    let v = self.reduce(f, args)?;
                    self.push(v);
                }
                0x81 => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let args = self.tuple_items(&args)?;
                    let v = self.newobj(cls, args)?;
                    self.push(v);
                }
                b'b' => {
                    let state = self.pop()?;
                    self.build(state)?;
                }
                other => return Err(Refusal::UnsupportedOpcode(opcode_name(other))),
            }
        }
    }

    /// `REDUCE`: a call, interpreted only for the allowed globals (and exception classes in an
    /// error column); nothing is ever called.
    fn reduce(&mut self, f: Py, args: Vec<Py>) -> Result<Py, Refusal> {
        let Py::Global(g) = f else {
            return Err(malformed("REDUCE of something not a class or function"));
        };
        let refused = || {
            Refusal::UnsupportedValue(format!(
                "{}.{} called with {} argument(s) stead does not read",
                g.module,
                g.name,
                args.len()
            ))
        };
        let v = match (g.canonical, g.name.as_str(), args.as_slice()) {
            ("builtins", "set" | "frozenset", []) => self.new_obj(Obj::Set(Vec::new())),
            ("builtins", "set" | "frozenset", [Py::Obj(i)]) => {
                let items = match &self.arena[*i] {
                    Obj::List(v) | Obj::Tuple(v) | Obj::Set(v) => v.clone(),
                    _ => return Err(refused()),
                };
                let items = self.copied(items)?;
                self.new_obj(Obj::Set(items))
            }
            ("builtins", "bytes" | "bytearray", []) => Py::Bytes(Rc::from(&[][..])),
            ("builtins", "bytearray", [Py::Bytes(b)]) => Py::Bytes(b.clone()),
            // Protocol 2's bytes: `_codecs.encode(text, 'latin1')`, code points as bytes.
            ("builtins", "bytearray" | "bytes", [Py::Str(s), Py::Str(codec)])
            | ("_codecs", "encode", [Py::Str(s), Py::Str(codec)])
                if matches!(&**codec, "latin1" | "latin-1") =>
            {
                Py::Bytes(latin1(s)?.into())
            }
            ("collections", "OrderedDict", []) => self.new_obj(Obj::Dict(Vec::new())),
            ("datetime", "timedelta", [Py::Int(d), Py::Int(s), Py::Int(us)]) => {
                Py::Timedelta(types::timedelta(d, s, us)?)
            }
            ("datetime", "timezone", [Py::Timedelta(offset)] | [Py::Timedelta(offset), _]) => {
                Py::Tz(types::utc_offset(*offset)?)
            }
            ("datetime", "date", [Py::Bytes(state)]) => {
                Py::Text(TextKind::Date, types::date_text(state)?.into())
            }
            ("datetime", "datetime", [Py::Bytes(state)]) => {
                Py::Text(TextKind::DateTime, types::datetime_text(state, 0)?.into())
            }
            ("datetime", "datetime", [Py::Bytes(state), Py::Tz(offset)]) => Py::Text(
                TextKind::DateTime,
                types::datetime_text(state, *offset)?.into(),
            ),
            ("datetime", "datetime", [Py::Bytes(_), _]) => {
                return Err(Refusal::UnsupportedValue(
                    "a datetime whose time zone is not a fixed offset".into(),
                ))
            }
            ("decimal", "Decimal", [Py::Str(s)]) => {
                Py::Text(TextKind::Decimal, types::decimal_text(s)?.into())
            }
            _ if self.errors && !g.allowed() => self.new_obj(Obj::Exception {
                name: g.name.clone(),
                args,
            }),
            _ => return Err(refused()),
        };
        Ok(v)
    }

    /// `NEWOBJ`: `cls.__new__(cls, *args)`, read only for a UUID (and, in an error column, an
    /// exception class).
    fn newobj(&mut self, cls: Py, args: Vec<Py>) -> Result<Py, Refusal> {
        match cls {
            Py::Global(g) if g.is("uuid", "UUID") && args.is_empty() => {
                Ok(self.new_obj(Obj::NewUuid))
            }
            Py::Global(g) if self.errors && !g.allowed() => Ok(self.new_obj(Obj::Exception {
                name: g.name.clone(),
                args,
            })),
            Py::Global(g) => Err(Refusal::UnsupportedValue(format!(
                "a {}.{} built from its state",
                g.module, g.name
            ))),
            _ => Err(malformed("NEWOBJ of something not a class")),
        }
    }

    /// `BUILD`: sets an object's state; read only for a UUID (`{'int': n, ...}`), and ignored
    /// for an exception (its message is its arguments).
    fn build(&mut self, state: Py) -> Result<(), Refusal> {
        let uuid = match &state {
            Py::Obj(i) => match &self.arena[*i] {
                Obj::Dict(fields) => fields.iter().find_map(|(k, v)| match (k, v) {
                    (Py::Str(k), Py::Int(n)) if &**k == "int" => Some(n.to_u128()),
                    _ => None,
                }),
                _ => None,
            },
            _ => None,
        };
        match self.top_obj()? {
            Obj::NewUuid => {
                let n = uuid.flatten().ok_or_else(|| {
                    Refusal::UnsupportedValue("a uuid.UUID without its 128-bit int".into())
                })?;
                *self.top_obj()? = Obj::Text(TextKind::Uuid, types::uuid_text(n).into());
                Ok(())
            }
            Obj::Exception { .. } => Ok(()),
            _ => Err(Refusal::UnsupportedValue(
                "an object built from its state".into(),
            )),
        }
    }
}

/// `[k1, v1, k2, v2, ...]` as pairs.
fn pairs(items: Vec<Py>) -> Result<Vec<(Py, Py)>, Refusal> {
    if !items.len().is_multiple_of(2) {
        return Err(malformed("a dict of an odd number of items"));
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut items = items.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        out.push((k, v));
    }
    Ok(out)
}
