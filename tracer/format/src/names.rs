//! Java names as reports show them, the same in every run and from every
//! source (the JVM agent's call trees, the flight recorder's stacks):
//! classes in Java form (`org.h2.mvstore.tx.Transaction`), hidden classes
//! without the address the JVM gave them (`Main$$Lambda$14+0x00007f6b40007a08/17904`
//! from JFR, `Main$$Lambda$14.0x00007f6b40007a08` from JVMTI → `Main$$Lambda`),
//! and lambda and proxy numbers dropped, since they depend on the order
//! classes were loaded in; and the pattern a pool's threads share
//! ([`thread_pattern`]), the same for the reports and the flight
//! recorder's triggers; and HotSpot's own threads, by the names the kernel
//! gives them ([`hotspot_internal`]).

/// A class name (internal `a/b/C` or Java `a.b.C` form), normalized.
pub fn class(name: &str) -> String {
    // A hidden class's address and what follows it, in either spelling:
    // `Main$$Lambda$88+0x00007f6b40007a08/1790421142` (the JVM's, as JFR
    // writes it) or `Main$$Lambda$88/0x0000000800c0b000` (`Class.getName`).
    let mut base = name;
    for marker in ["+0x", "/0x"] {
        if let Some(at) = base.find(marker) {
            if base[at + 3..].starts_with(|c: char| c.is_ascii_hexdigit()) {
                base = &base[..at];
            }
        }
    }
    let mut s = base.replace('/', ".");
    // JVMTI's spelling of the same: `Main$$Lambda$88.0x00007f6b40007a08`.
    if let Some(at) = s.rfind(".0x") {
        if at + 3 < s.len() && s[at + 3..].chars().all(|c| c.is_ascii_hexdigit()) {
            s.truncate(at);
        }
    }
    for marker in ["$$Lambda$", "$Proxy"] {
        if let Some(at) = s.find(marker) {
            let digits_at = at + marker.len();
            let digits = s[digits_at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .count();
            if digits > 0 {
                let cut = if marker.ends_with('$') {
                    digits_at - 1
                } else {
                    digits_at
                };
                s.replace_range(cut..digits_at + digits, "");
            }
        }
    }
    s
}

/// A method as `pkg.Class.method`.
pub fn method(class_name: &str, method: &str) -> String {
    match (class_name.is_empty(), method.is_empty()) {
        (true, true) => "[unknown method]".into(),
        (true, false) => method.into(),
        (false, true) => format!("{class_name}.[unknown]"),
        (false, false) => format!("{class_name}.{method}"),
    }
}

/// The name under which pool threads are merged: a number that ends the
/// name becomes `*` (`http-nio-8080-exec-12` → `http-nio-8080-exec-*`,
/// `pool-1-thread-3` → `pool-1-thread-*`); other names stay as they are.
pub fn thread_pattern(name: &str) -> String {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() == name.len() {
        name.to_string()
    } else {
        format!("{stem}*")
    }
}

/// Names of HotSpot's own threads (as the kernel names them, 15
/// characters): they never run Java code.
pub fn hotspot_internal(name: &str) -> bool {
    const PREFIXES: [&str; 16] = [
        "VM Thread",
        "VM Periodic Tas",
        "GC Thread#",
        "G1 ",
        "C1 CompilerThre",
        "C2 CompilerThre",
        "Sweeper thread",
        "Signal Dispatch",
        "Service Thread",
        "Monitor Deflati",
        "Notification Th",
        "VM JFR Buffer T",
        "ZDirector",
        "ZStat",
        "ZWorker",
        "Shenandoah",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_spelled_the_same_in_every_run() {
        assert_eq!(
            class("org/h2/mvstore/tx/Transaction"),
            "org.h2.mvstore.tx.Transaction"
        );
        assert_eq!(
            class("org/example/Main$$Lambda$14/0x0000000800c0b000"),
            "org.example.Main$$Lambda"
        );
        assert_eq!(class("Main$$Lambda$123+0x0000000800c0b000"), "Main$$Lambda");
        assert_eq!(
            class("LockedIo$$Lambda$88+0x00007f6b40007a08/1790421142"),
            "LockedIo$$Lambda"
        );
        assert_eq!(class("jdk.proxy1.$Proxy12"), "jdk.proxy1.$Proxy");
        assert_eq!(class("a.b.Outer$Inner"), "a.b.Outer$Inner");
        assert_eq!(
            class("LockedIo$$Lambda$1.0x00007fc330000a08"),
            "LockedIo$$Lambda"
        );
        // Not an address: kept.
        assert_eq!(class("a/b/Weird/0xyz"), "a.b.Weird.0xyz");
    }

    #[test]
    fn hotspots_own_threads_are_known_by_their_kernel_names() {
        assert!(hotspot_internal("C2 CompilerThre"));
        assert!(hotspot_internal("GC Thread#3"));
        assert!(!hotspot_internal("worker-3"));
        assert!(!hotspot_internal("http-nio-8080-e"));
    }

    #[test]
    fn methods_join_class_and_name() {
        assert_eq!(method("a.B", "run"), "a.B.run");
        assert_eq!(method("", ""), "[unknown method]");
    }

    #[test]
    fn pool_threads_share_a_pattern() {
        assert_eq!(
            thread_pattern("http-nio-8080-exec-12"),
            "http-nio-8080-exec-*"
        );
        assert_eq!(thread_pattern("pool-1-thread-3"), "pool-1-thread-*");
        assert_eq!(thread_pattern("C2 CompilerThread0"), "C2 CompilerThread*");
        assert_eq!(
            thread_pattern("http-nio-8080-Poller"),
            "http-nio-8080-Poller"
        );
        assert_eq!(thread_pattern("main"), "main");
        assert_eq!(thread_pattern("7"), "*");
    }
}
