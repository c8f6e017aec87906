//! A JFR chunk written here, byte by byte, for the reader's tests and the
//! fuzz target's seed corpus.

/// A compressed-integer encoder for the constructed chunk below.
fn var(out: &mut Vec<u8>, v: i64) {
    let mut v = v as u64;
    for _ in 0..8 {
        if v < 0x80 {
            out.push(v as u8);
            return;
        }
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn utf8(out: &mut Vec<u8>, s: &str) {
    out.push(3);
    var(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

/// An event: its size (one varint byte, padded), type, body.
fn event(kind: i64, body: &[u8]) -> Vec<u8> {
    let mut e = Vec::new();
    var(&mut e, kind);
    e.extend_from_slice(body);
    // Size as a 2-byte varint so it covers itself.
    let size = e.len() + 2;
    let mut out = vec![(size as u8 & 0x7f) | 0x80, (size >> 7) as u8];
    out.extend(e);
    out
}

/// A chunk with classes long (id 1), java.lang.String (2), Sym (3:
/// `string` a String), Ev (100: `n` long, `sym` pooled Sym, `xs` long[])
/// and one Ev event.
pub fn chunk() -> Vec<u8> {
    let strings = [
        "",
        "metadata",
        "class",
        "field",
        "id",
        "name",
        "long",
        "java.lang.String",
        "Sym",
        "string",
        "Ev",
        "n",
        "sym",
        "xs",
        "constantPool",
        "true",
        "dimension",
        "1",
        "2",
        "3",
        "100",
        "root",
    ];
    let s = |t: &str| strings.iter().position(|x| *x == t).unwrap() as i64;
    let mut m = Vec::new();
    for v in [0, 0, 0] {
        var(&mut m, v); // start, duration, id
    }
    var(&mut m, strings.len() as i64);
    for t in strings {
        utf8(&mut m, t);
    }
    var(&mut m, s("root"));
    // root: no attributes, one child "metadata" with 4 classes.
    var(&mut m, 0);
    var(&mut m, 1);
    var(&mut m, s("metadata"));
    var(&mut m, 0);
    var(&mut m, 4);
    let class = |m: &mut Vec<u8>, id: &str, name: &str, fields: &[(&str, &str, bool, bool)]| {
        var(m, s("class"));
        var(m, 2);
        for (k, v) in [("id", id), ("name", name)] {
            var(m, s(k));
            var(m, s(v));
        }
        var(m, fields.len() as i64);
        for (fname, fclass, pooled, array) in fields {
            var(m, s("field"));
            let mut attrs = vec![("name", *fname), ("class", *fclass)];
            if *pooled {
                attrs.push(("constantPool", "true"));
            }
            if *array {
                attrs.push(("dimension", "1"));
            }
            var(m, attrs.len() as i64);
            for (k, v) in attrs {
                var(m, s(k));
                var(m, s(v));
            }
            var(m, 0);
        }
    };
    class(&mut m, "1", "long", &[]);
    class(&mut m, "2", "java.lang.String", &[]);
    class(&mut m, "3", "Sym", &[("string", "2", false, false)]);
    class(
        &mut m,
        "100",
        "Ev",
        &[
            ("n", "1", false, false),
            ("sym", "3", true, false),
            ("xs", "1", false, true),
        ],
    );
    let meta = event(0, &m);
    // Checkpoint: start, duration, delta 0, kind, 1 pool: Sym, entry 7 = "hello".
    let mut cp = Vec::new();
    for v in [0, 0, 0] {
        var(&mut cp, v);
    }
    cp.push(0);
    var(&mut cp, 1);
    var(&mut cp, 3);
    var(&mut cp, 1);
    var(&mut cp, 7);
    utf8(&mut cp, "hello");
    let cp = event(1, &cp);
    let mut ev = Vec::new();
    var(&mut ev, -5);
    var(&mut ev, 7);
    var(&mut ev, 2);
    var(&mut ev, 300);
    var(&mut ev, 4);
    let ev = event(100, &ev);
    let meta_at = 68;
    let ev_at = meta_at + meta.len();
    let cp_at = ev_at + ev.len();
    let size = cp_at + cp.len();
    let mut out = b"FLR\0".to_vec();
    out.extend(2u16.to_be_bytes());
    out.extend(1u16.to_be_bytes());
    for v in [
        size as i64,
        cp_at as i64,
        meta_at as i64,
        1_000,
        2_000,
        10,
        1_000_000_000,
    ] {
        out.extend(v.to_be_bytes());
    }
    out.extend(1u32.to_be_bytes());
    out.extend(meta);
    out.extend(ev);
    out.extend(cp);
    out
}
