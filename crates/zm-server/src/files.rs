//! Local files with private modes (Unix): the data directory `0700`, the
//! SQLite database `0600` (SQLite gives its `-wal` and `-shm` files the
//! database file's mode), and every file holding secrets or memories that
//! a command writes (`export --out`, `--first-start-output`) `0600`.
//! A database group or others can read or write, and a data directory
//! they can write, draw a warning.

use std::fs::File;
use std::io;
use std::path::Path;

use crate::config::Config;

/// Mode of a directory we create.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Mode of a file we create.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Create `dir` (mode `0700`) unless it exists; its missing parents get the
/// usual mode.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(PRIVATE_DIR_MODE);
    }
    match builder.create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        other => other,
    }
}

/// Create `path`, which must not exist, `0600` (`O_EXCL`: a file or a
/// symbolic link planted there is refused, never followed).
pub fn create_new_private_file(path: &Path) -> io::Result<File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(PRIVATE_FILE_MODE);
    }
    opts.open(path)
}

/// Open `path` for writing, truncated; a new file is created `0600`, and a
/// regular file that existed is set to `0600` before anything is written.
pub fn create_private_file(path: &Path) -> io::Result<File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(PRIVATE_FILE_MODE);
    }
    let file = opts.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // Not a device or a pipe (`--out /dev/stdout`): leave those alone.
        if file.metadata()?.is_file() {
            file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE_MODE))?;
        }
    }
    Ok(file)
}

/// Before opening a SQLite database that may be created: its directory
/// (`0700`) and an empty database file (`0600`), so the database — and the
/// WAL and shared-memory files SQLite creates with the database file's
/// mode — are private from the first byte. Then warn about a database that
/// group or others can read, and a directory they can write (a readable
/// one shows only file names, as `/var/lib` does). Nothing for PostgreSQL.
pub fn prepare_database(cfg: &Config) -> io::Result<()> {
    prepare_database_url(&cfg.open_options().url)
}

/// [`prepare_database`] for a database URL (the destination of `copy`).
pub fn prepare_database_url(url: &str) -> io::Result<()> {
    let Some(db) = zm_store::sqlite_path(url) else {
        return Ok(());
    };
    let creates = url.contains("mode=rwc");
    if creates {
        if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir(dir)?;
        }
        if !db.exists() {
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(PRIVATE_FILE_MODE);
            }
            match opts.open(&db) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
    }
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty())
        && let Some(mode) = writable_by_others(dir)
    {
        tracing::warn!(
            path = %dir.display(),
            mode = format!("{mode:o}"),
            "other users of this machine can delete or replace the database in {}: keep it in a directory only this account can write (or chmod go-w it)",
            dir.display()
        );
    }
    if let Some(mode) = exposed_mode(&db) {
        tracing::warn!(
            path = %db.display(),
            mode = format!("{mode:o}"),
            "the database is open to other users of this machine (memories, password hashes and token hashes live there); fix: chmod 600 {}",
            db.display()
        );
    }
    Ok(())
}

/// The mode of a directory that group or others can write, if it is one
/// (Unix). Sticky or not: in a sticky one (`/tmp`) they cannot remove our
/// files, but they can still plant a `-wal` file for SQLite to replay
/// while none is there (between runs).
pub fn writable_by_others(dir: &Path) -> Option<u32> {
    mode_of(dir).filter(|m| m & 0o022 != 0)
}

/// The mode bits group and others have on `path`, if any (Unix).
pub fn exposed_mode(path: &Path) -> Option<u32> {
    mode_of(path).map(|m| m & 0o777).filter(|m| m & 0o077 != 0)
}

/// `path`'s permission bits with set-id and sticky (Unix; `None`
/// elsewhere, or when it cannot be read).
fn mode_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(std::fs::metadata(path).ok()?.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn private_files_and_directories() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a").join("data");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        create_private_dir(&dir).unwrap();

        let file = dir.join("secret.txt");
        std::fs::write(&file, "old").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(exposed_mode(&file), Some(0o644));
        let mut f = create_private_file(&file).unwrap();
        f.write_all(b"new").unwrap();
        assert_eq!(mode(&file), 0o600, "an existing file is made private");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        assert_eq!(exposed_mode(&file), None);

        // A directory others may read is no warning; one they may write is,
        // sticky or not.
        assert_eq!(writable_by_others(&dir), None);
        for (set, warned) in [
            (0o755, None),
            (0o775, Some(0o775)),
            (0o757, Some(0o757)),
            (0o1777, Some(0o1777)),
        ] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(set)).unwrap();
            assert_eq!(writable_by_others(&dir), warned, "{set:o}");
        }
    }
}
