//! Reading a chat template's file, which comes from a model repository (code a stranger
//! wrote, symlinks and all): only a regular file of ordinary size, never a kernel or device
//! file. A symlink `chat_template.jinja -> /proc/self/environ` (git keeps symlinks) rendered
//! the environment, the API key included, into every row, and a 1.1 GB file aborted harvest
//! on a 4 GiB allocation (reliability-probe-5 P7).

use std::io::Read;
use std::path::{Path, PathBuf};

use super::TemplateError;

/// The largest template file read: 4 MiB. A chat template is a few KiB; the largest
/// `tokenizer_config.json` that carries one is about 1.2 MB (Gemma 3's, mostly its added
/// tokens). Anything bigger is not a template, and reading it whole costs its size in memory.
pub(crate) const MAX_TEMPLATE_BYTES: u64 = 4 << 20;

/// Trees of kernel and device files: their "files" are the process's environment and memory
/// (`/proc/self/environ`), kernel state, or endless streams.
const SYSTEM_TREES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Filesystem types of kernel files, for a procfs or sysfs mounted elsewhere (a container's
/// `/host/proc`), which the path alone does not show (statfs(2)).
#[cfg(any(target_os = "linux", target_os = "android"))]
const KERNEL_FILESYSTEMS: [(u64, &str); 2] = [(0x9fa0, "procfs"), (0x6265_6572, "sysfs")];

/// What reading the template's file found.
pub(super) enum Found {
    Text(String),
    /// Nothing at that path (the caller looks for a built-in template of that name).
    Missing(std::io::Error),
}

/// Reads the template file at `path`: refused when it resolves under /proc, /sys or /dev, is
/// not a regular file, lives on a kernel filesystem, or is larger than
/// [`MAX_TEMPLATE_BYTES`] (by its size, and by what is read, for a file that grows).
pub(super) fn read(path: &Path) -> Result<Found, TemplateError> {
    let refuse = |why: String| TemplateError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    };
    let failed = |source: std::io::Error| TemplateError::Read {
        path: path.to_path_buf(),
        source,
    };
    let real: PathBuf = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing(e)),
        Err(e) => return Err(failed(e)),
    };
    if let Some(tree) = SYSTEM_TREES.iter().find(|t| real.starts_with(t)) {
        return Err(refuse(format!(
            "it resolves to {}, under {tree}: a kernel or device file, not a template (give \
             the template's own file)",
            real.display()
        )));
    }
    // The checks are made on the file opened, not on the path: what is read is what passed.
    // A FIFO would block the open itself, so the type is first seen from the path
    // (reliability-probe-4 N11), then again from the open file.
    let not_regular = || {
        refuse(
            "not a regular file (a FIFO, a device, a socket or a directory): give the \
             template's file"
                .into(),
        )
    };
    if !std::fs::metadata(&real).map_err(failed)?.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::File::open(&real).map_err(failed)?;
    let meta = file.metadata().map_err(failed)?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Ok(fs) = rustix::fs::fstatfs(&file) {
        #[allow(clippy::unnecessary_cast)] // f_type is i64 or u32 by platform
        let kind = fs.f_type as u64;
        if let Some((_, name)) = KERNEL_FILESYSTEMS.iter().find(|(m, _)| *m == kind) {
            return Err(refuse(format!(
                "it is a {name} file ({}): a kernel file, not a template",
                real.display()
            )));
        }
    }
    let too_big = |size: String| {
        refuse(format!(
            "{size}, more than the {} MiB a chat template may be (a real one is a few KiB)",
            MAX_TEMPLATE_BYTES >> 20
        ))
    };
    if meta.len() > MAX_TEMPLATE_BYTES {
        return Err(too_big(format!("{} bytes", meta.len())));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_TEMPLATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() as u64 > MAX_TEMPLATE_BYTES {
        return Err(too_big("it grew while read".into()));
    }
    String::from_utf8(bytes)
        .map(Found::Text)
        .map_err(|e| failed(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(path: &Path) -> String {
        match read(path) {
            Err(e) => e.to_string(),
            Ok(Found::Text(t)) => panic!("read {} bytes of {}", t.len(), path.display()),
            Ok(Found::Missing(e)) => panic!("missing {}: {e}", path.display()),
        }
    }

    /// The probe's symlink: a model repository's `chat_template.jinja` linked to the
    /// environment, key included. Refused, naming the file and where it leads.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_link_to_the_environment_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let link = dir.path().join("chat_template.jinja");
        std::os::unix::fs::symlink("/proc/self/environ", &link).expect("symlink");
        let err = refused(&link);
        assert!(err.contains("chat_template.jinja"), "{err}");
        assert!(err.contains("under /proc"), "{err}");
        assert!(
            !err.contains("PATH="),
            "no environment in the message: {err}"
        );
        for direct in [
            "/proc/self/environ",
            "/sys/kernel/mm/transparent_hugepage/enabled",
        ] {
            let p = Path::new(direct);
            if p.exists() {
                let err = refused(p);
                assert!(err.contains("a kernel or device file"), "{err}");
            }
        }
        // /dev/zero is no regular file, and under /dev besides.
        assert!(refused(Path::new("/dev/zero")).contains("under /dev"));
    }

    /// A file larger than the cap is refused from its size, before a byte is read: a sparse
    /// file of 1.1 GB (the probe's, which aborted on a 4 GiB allocation) costs nothing to make.
    /// One byte over the cap is refused too, and one exactly at it is read.
    #[test]
    fn a_file_over_the_size_cap_is_refused_by_its_size() {
        let dir = tempfile::tempdir().expect("tmp");
        let big = dir.path().join("big.jinja");
        let f = std::fs::File::create(&big).expect("create");
        f.set_len(1_100_000_000).expect("sparse");
        let err = refused(&big);
        assert!(err.contains("big.jinja"), "{err}");
        assert!(
            err.contains("1100000000 bytes, more than the 4 MiB"),
            "{err}"
        );
        f.set_len(MAX_TEMPLATE_BYTES + 1).expect("sparse");
        assert!(refused(&big).contains("more than the 4 MiB"));
        // At the cap: NUL bytes are UTF-8, so it is read whole.
        f.set_len(MAX_TEMPLATE_BYTES).expect("sparse");
        match read(&big) {
            Ok(Found::Text(t)) => assert_eq!(t.len() as u64, MAX_TEMPLATE_BYTES),
            _ => panic!("a file at the cap is read"),
        }
    }

    #[test]
    fn a_missing_file_is_told_apart() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(matches!(
            read(&dir.path().join("nothing.jinja")),
            Ok(Found::Missing(_))
        ));
        let ok = dir.path().join("t.jinja");
        std::fs::write(&ok, "{{ messages }}").expect("write");
        let link = dir.path().join("link.jinja");
        std::os::unix::fs::symlink(&ok, &link).expect("symlink");
        // A link to an ordinary file (as a Hugging Face cache holds them) is read.
        match read(&link) {
            Ok(Found::Text(t)) => assert_eq!(t, "{{ messages }}"),
            _ => panic!("a link to a regular file is read"),
        }
    }
}
