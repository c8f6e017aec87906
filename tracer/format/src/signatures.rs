//! JVM type signatures in Java source form: class names (`[Ljava/lang/String;`
//! → `java.lang.String[]`) and method parameter lists, as perf maps and
//! stacks show them.
//!
//! Invariant: pure string functions that never fail and never panic; a
//! string that is not a signature comes back as far as it could be read.

/// Turns a JVM type signature into the Java source name:
/// `Lcom/example/Pool;` → `com.example.Pool`, `[I` → `int[]`,
/// `[Ljava/lang/String;` → `java.lang.String[]`, `I` → `int`.
///
/// Never fails: a string that is not a type signature comes back with `/`
/// turned into `.`. A hidden class (JVMTI gives `Lp/Foo$$Lambda$14.0x…;`)
/// is named without its address and number: `p.Foo$$Lambda`.
pub fn java_class_name(signature: &str) -> String {
    let dims = signature.bytes().take_while(|&b| b == b'[').count();
    let element = &signature[dims..];
    let base = match element {
        "Z" => "boolean".to_owned(),
        "B" => "byte".to_owned(),
        "C" => "char".to_owned(),
        "S" => "short".to_owned(),
        "I" => "int".to_owned(),
        "J" => "long".to_owned(),
        "F" => "float".to_owned(),
        "D" => "double".to_owned(),
        "V" => "void".to_owned(),
        _ => match element
            .strip_prefix('L')
            .and_then(|rest| rest.strip_suffix(';'))
        {
            // Hidden classes lose their address and lambda number
            // (`idleflow_format::names`), as in the flight recorder's stacks.
            Some(binary_name) if !binary_name.is_empty() => crate::names::class(binary_name),
            _ => return signature.replace('/', "."),
        },
    };
    let mut name = base;
    for _ in 0..dims {
        name.push_str("[]");
    }
    name
}

/// A method signature's parameter list in Java source form:
/// `(Ljava/lang/String;I[J)V` → `(java.lang.String, int, long[])`, as
/// HotSpot's own perf map writes it. A malformed signature comes back
/// as far as it could be read.
pub fn java_parameters(signature: &str) -> String {
    let params = signature
        .strip_prefix('(')
        .and_then(|s| s.split_once(')'))
        .map_or("", |(p, _)| p);
    let mut names = Vec::new();
    let mut rest = params;
    while !rest.is_empty() {
        let dims = rest.bytes().take_while(|&b| b == b'[').count();
        let len = match rest.as_bytes().get(dims) {
            Some(b'L') => match rest[dims..].find(';') {
                Some(end) => dims + end + 1,
                None => rest.len(),
            },
            Some(_) => dims + 1,
            None => rest.len(),
        };
        names.push(java_class_name(&rest[..len]));
        rest = &rest[len..];
    }
    format!("({})", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_signatures_become_parameter_lists() {
        let cases = [
            ("()V", "()"),
            (
                "(Ljava/lang/String;I[J)V",
                "(java.lang.String, int, long[])",
            ),
            (
                "([[Lcom/x/Pool;Z)Ljava/lang/Object;",
                "(com.x.Pool[][], boolean)",
            ),
            ("(Ljava/lang/Str)V", "(Ljava.lang.Str)"),
            ("(Ljava/lang/Str", "()"),
            ("garbage", "()"),
        ];
        for (signature, expected) in cases {
            assert_eq!(java_parameters(signature), expected, "{signature}");
        }
    }

    #[test]
    fn class_signatures_become_java_names() {
        let cases = [
            ("Lcom/example/Pool;", "com.example.Pool"),
            ("Ljava/lang/String;", "java.lang.String"),
            ("LMain;", "Main"),
            ("Lcom/example/Outer$Inner;", "com.example.Outer$Inner"),
            ("[I", "int[]"),
            ("[[J", "long[][]"),
            ("[Z", "boolean[]"),
            ("[Ljava/lang/String;", "java.lang.String[]"),
            ("[[Lcom/example/Pool;", "com.example.Pool[][]"),
            ("I", "int"),
            ("V", "void"),
            (
                "Lcom/example/Foo$$Lambda$14.0x0000000800c03000;",
                "com.example.Foo$$Lambda",
            ),
        ];
        for (signature, expected) in cases {
            assert_eq!(java_class_name(signature), expected, "{signature}");
        }
    }

    #[test]
    fn malformed_signatures_do_not_panic() {
        for junk in [
            "",
            "[",
            "[[",
            "L",
            "L;",
            "Lcom/example/Pool",
            "[Q",
            "é/ü",
            "[é",
        ] {
            let name = java_class_name(junk);
            assert!(!name.contains('/'), "{junk:?} -> {name:?}");
        }
        assert_eq!(java_class_name("Lcom/example/Pool"), "Lcom.example.Pool");
        assert_eq!(java_class_name(""), "");
    }
}
