//! The rules of `files`, on constructed files (these tests run as root).
use super::*;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[test]
fn a_staged_file_is_private_and_replaces_a_planted_link_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let out = dir.path().join("run.idleflow");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    // Planted by someone else (these tests run as root).
    std::os::unix::fs::lchown(&out, Some(65534), Some(65534)).unwrap();
    let (mut file, staged) = stage(&out).unwrap();
    let temp = staged.temp_path();
    assert!(temp.to_str().unwrap().ends_with(".partial"), "{temp:?}");
    assert_eq!(partials_of(&out), vec![temp.clone()]);
    assert_eq!(
        std::fs::metadata(&temp).unwrap().permissions().mode() & 0o777,
        0o600
    );
    file.write_all(b"recording").unwrap();
    staged.commit().unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::read(&out).unwrap(), b"recording");
    assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
    assert!(partials_of(&out).is_empty());
}

#[test]
fn a_device_or_a_link_to_one_is_never_staged_over() {
    let e = stage(Path::new("/dev/null")).unwrap_err().to_string();
    assert!(e.contains("not a file"), "{e}");
    // `/dev/stdout`: root's link, left as it is whatever it points to.
    let e = stage(Path::new("/dev/stdout")).unwrap_err().to_string();
    assert!(e.contains("a symbolic link"), "{e}");
    assert!(std::fs::symlink_metadata("/dev/stdout")
        .unwrap()
        .is_symlink());
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("out");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    assert!(stage(&link).is_err());
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    let e = stage(dir.path()).unwrap_err().to_string();
    assert!(e.contains("a directory is in the way"), "{e}");
}

#[test]
fn a_bare_file_name_stays_bare() {
    let dir = tempfile::tempdir().unwrap();
    let was = std::env::current_dir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let staged = stage(Path::new("run.idleflow")).map(|(_, s)| s);
    std::env::set_current_dir(was).unwrap();
    let staged = staged.unwrap();
    assert_eq!(staged.path(), Path::new("run.idleflow"));
    assert!(staged
        .temp_path()
        .to_str()
        .unwrap()
        .starts_with("run.idleflow."));
}

#[test]
fn a_name_taken_by_a_link_is_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dir::open(dir.path()).unwrap();
    std::os::unix::fs::symlink("/nonexistent-target", dir.path().join("x")).unwrap();
    let e = d.create_new(OsStr::new("x")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(!Path::new("/nonexistent-target").exists());
}

#[test]
fn a_directory_others_can_write_is_refused_unless_sticky() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Dir::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("writable by other users (mode 0777)"), "{e}");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(Dir::open(dir.path()).unwrap().shared());
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(!Dir::open(dir.path()).unwrap().shared());
}

#[test]
fn untrusted_reads_refuse_links_fifos_and_long_files() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"1 2 x\n").unwrap();
    assert_eq!(read_untrusted(&plain, &[], 100).unwrap(), b"1 2 x\n");
    let e = read_untrusted(&plain, &[], 3).unwrap_err().to_string();
    assert!(e.contains("6 bytes, over the bound of 3"), "{e}");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&plain, &link).unwrap();
    assert!(matches!(
        read_untrusted(&link, &[], 100),
        Err(Untrusted::Link(_))
    ));
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let e = read_untrusted(&fifo, &[], 100).unwrap_err().to_string();
    assert!(e.contains("not a regular file (a FIFO)"), "{e}");
    assert!(matches!(
        read_untrusted(&dir.path().join("none"), &[], 100),
        Err(Untrusted::Missing(_))
    ));
    assert!(matches!(
        read_untrusted(Path::new("/dev/zero"), &[], 100),
        Err(Untrusted::NotRegular { .. })
    ));
}

#[test]
fn an_output_to_a_stream_is_written_as_it_is_and_a_file_is_staged() {
    let out = create_output(Path::new("/dev/null")).unwrap();
    assert!(out.staged.is_none());
    out.commit().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.html");
    std::fs::write(&path, b"old").unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    let mut out = create_output(&path).unwrap();
    out.file.write_all(b"new").unwrap();
    out.commit().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), ino);
}
