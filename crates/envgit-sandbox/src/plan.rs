//! From policy to mount plan: which paths the command may write, which it may not read, what
//! is protected, and which environment variables enter.

use std::path::{Path, PathBuf};

use envgit_policy::Policy;
use ignore::gitignore::GitignoreBuilder;

use crate::host_secrets::HostSecrets;
pub use crate::project_index::{
    ExcludedRepository, ListingVouch, MAX_LINK_BINDS, ProjectFacts, ProjectIndex, Seen,
    TooManyHardLinks, excluded_repositories, project_facts, unwalked_roots,
};
use crate::spec::{Overlay, RelaySpec, Spec};
use crate::trust::{self, TrustFiles};

/// Unreadable in every home (`~` from both `$HOME` and the passwd entry), relative to the
/// home; a file or a directory (a directory is masked whole). To mask one more credential
/// file, add its path here: `escape.rs`'s `every_home_credential_file_is_masked` plants a
/// canary at every entry of this list and reads it from inside, so the new entry is tested
/// as it is added. (A policy can add its own with `filesystem.deny_read`.)
pub const HOME_DENIES: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gh",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".docker/config.json",
    ".kube",
    ".config/gcloud",
    ".azure",
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".config/github-copilot",
    ".copilot/config.json",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".local/share/keyrings",
    ".password-store",
    // Database, secret-store, registry and build-tool credentials.
    ".pgpass",
    ".my.cnf",
    ".vault-token",
    ".config/containers/auth.json",
    ".terraform.d/credentials.tfrc.json",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".gem/credentials",
    ".config/rclone/rclone.conf",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".yarnrc.yml",
    ".yarnrc",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".config/hub",
    ".config/glab-cli",
    // Object-store, cloud and platform CLIs' keys and tokens, kept in plain files.
    ".s3cfg",
    ".boto",
    ".mc/config.json",
    ".oci",
    ".fly/config.yml",
    ".databrickscfg",
    ".pulumi/credentials.json",
    ".config/doctl/config.yaml",
    ".config/hcloud/cli.toml",
    ".wrangler/config/default.toml",
    ".config/.wrangler/config/default.toml",
    ".config/netlify/config.json",
    ".local/share/com.vercel.cli/auth.json",
    ".config/configstore/firebase-tools.json",
    ".config/ngrok/ngrok.yml",
    ".ngrok2/ngrok.yml",
    ".snowflake/connections.toml",
    ".snowsql/config",
    ".dbt/profiles.yml",
    ".terraformrc",
    ".gemini/oauth_creds.json",
    // sops' age keys: every secret the project's sops files encrypt.
    ".config/sops/age/keys.txt",
    // Package indexes' and registries' passwords (Poetry's and uv's when no keyring,
    // Composer's, Bundler's, NuGet's, sbt's and Ivy's).
    ".config/pypoetry/auth.toml",
    ".local/share/uv/credentials",
    ".config/composer/auth.json",
    ".composer/auth.json",
    ".bundle/config",
    ".nuget/NuGet/NuGet.Config",
    ".sbt/.credentials",
    ".ivy2/.credentials",
    // Shell and REPL histories (tokens typed or pasted at a prompt).
    ".bash_history",
    ".zsh_history",
    ".histfile",
    ".sh_history",
    ".local/share/fish/fish_history",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".rediscli_history",
    ".irb_history",
    ".lesshst",
    ".local/share/atuin",
];

/// Credentials the person's environment moves out of the places [`HOME_DENIES`] names: the
/// variable's value is the file or directory itself (`""`), or the directory holding it. A
/// list variable (`KUBECONFIG`) names several, `:`-separated.
const ENV_DENIES: &[(&str, &str)] = &[
    ("GOOGLE_APPLICATION_CREDENTIALS", ""),
    ("CLOUDSDK_CONFIG", ""),
    ("AWS_SHARED_CREDENTIALS_FILE", ""),
    ("AWS_CONFIG_FILE", ""),
    ("AZURE_CONFIG_DIR", ""),
    ("KUBECONFIG", ""),
    ("DOCKER_CONFIG", "config.json"),
    ("REGISTRY_AUTH_FILE", ""),
    ("GNUPGHOME", ""),
    ("PASSWORD_STORE_DIR", ""),
    ("CARGO_HOME", "credentials.toml"),
    ("CARGO_HOME", "credentials"),
    ("GH_CONFIG_DIR", ""),
    ("NPM_CONFIG_USERCONFIG", ""),
    ("npm_config_userconfig", ""),
    ("PGPASSFILE", ""),
    ("TF_CLI_CONFIG_FILE", ""),
    ("HF_HOME", "token"),
    ("HF_TOKEN_PATH", ""),
    ("RCLONE_CONFIG", ""),
    ("PIP_CONFIG_FILE", ""),
    ("GRADLE_USER_HOME", "gradle.properties"),
    ("CODEX_HOME", "auth.json"),
    ("CLAUDE_CONFIG_DIR", ".credentials.json"),
    ("HISTFILE", ""),
];

/// The XDG base directories a person may move, with the home's default each replaces in
/// [`HOME_DENIES`] (`.config/gh` is `$XDG_CONFIG_HOME/gh` then).
const XDG_DIRS: &[(&str, &str)] = &[
    ("XDG_CONFIG_HOME", ".config/"),
    ("XDG_DATA_HOME", ".local/share/"),
    ("XDG_CACHE_HOME", ".cache/"),
];

/// [`ENV_DENIES`] and [`HOME_DENIES`] under moved XDG directories, where `env` (the caller's)
/// puts them; a relative value is taken from `cwd`, as the program reading it would.
pub(crate) fn env_denies(env: &[(String, String)], cwd: &Path) -> Vec<PathBuf> {
    let value = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for (var, inner) in ENV_DENIES {
        let Some(v) = value(var) else {
            continue;
        };
        for p in v.split(':').filter(|p| !p.is_empty()) {
            let p = cwd.join(p);
            out.push(if inner.is_empty() { p } else { p.join(inner) });
        }
    }
    for (var, default) in XDG_DIRS {
        let Some(base) = value(var).map(|v| cwd.join(v)) else {
            continue;
        };
        out.extend(
            HOME_DENIES
                .iter()
                .filter_map(|d| d.strip_prefix(default))
                .map(|rest| base.join(rest)),
        );
    }
    out
}

/// Readable only by root, and masked when envgit runs as root. Besides these, every file or
/// directory under `/etc` that others may not read is masked (see [`etc_private`]).
pub(crate) const ROOT_DENIES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
];

/// The host's system directories the view shows read-only (those that exist; a symlink, as on
/// merged-/usr systems, is recreated as the same symlink). Nothing else of the host's `/` is
/// in the view: not the rest of `/var`, `/srv`, `/mnt`, `/media`, `/home` or `/root` — only
/// the project, the home (through its overlay), private `/tmp`, `/var/tmp`, `/run`, `/dev`
/// and `/proc`, the toolchain homes PATH names ([`toolchain_dirs`]) and `allow_write` paths.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc",
];

/// The spec's `system`: [`SYSTEM_DIRS`], then the toolchain homes ([`toolchain_dirs`]).
pub fn system_dirs(
    caller_env: &[(String, String)],
    project: &Path,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .chain(toolchain_dirs(caller_env, project, home))
        .collect()
}

/// The spec's `home`: the first of `homes` through the overlay `(upper, work)`, when both
/// are known (not yet `fresh`: the caller decides that).
pub fn home_overlay(homes: &[PathBuf], overlay: Option<&(PathBuf, PathBuf)>) -> Option<Overlay> {
    let (upper, work) = overlay?;
    Some(Overlay {
        path: homes.first()?.clone(),
        upper: upper.clone(),
        work: work.clone(),
        fresh: false,
        shared: None,
    })
}

/// Variables naming a toolchain's home outside the system directories: shown read-only when set.
const TOOLCHAIN_VARS: &[&str] = &[
    "RUSTUP_HOME",
    "CARGO_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    "GOROOT",
    "JAVA_HOME",
    "VIRTUAL_ENV",
];

/// Variables that enter the sandbox besides `env.pass`.
const SAFE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "TZ",
    "NO_COLOR",
    "COLUMNS",
    "LINES",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "NVM_DIR",
    "VIRTUAL_ENV",
];

/// How deep the search for `.env` files goes in the home (where hidden directories — caches,
/// toolchains — are skipped). A full walk of a home directory would cost seconds per step;
/// `.env` files deeper than this are left readable (say so in the docs). The project's are
/// found at any depth, from envgit's stat index ([`ProjectFacts`]).
const HOME_SEARCH_DEPTH: usize = 3;

pub struct PlanInput<'a> {
    pub policy: &'a Policy,
    /// Canonical.
    pub project: &'a Path,
    pub cwd: PathBuf,
    pub argv: Vec<String>,
    /// `$HOME` and the passwd entry's home (either may be missing).
    pub homes: Vec<PathBuf>,
    pub uid: u32,
    pub gid: u32,
    /// envgit's state ($ENVGIT_HOME): hidden.
    pub state_dirs: Vec<PathBuf>,
    pub staging: PathBuf,
    pub home_overlay: Option<(PathBuf, PathBuf)>,
    pub caller_env: Vec<(String, String)>,
    pub extra_env: Vec<(String, String)>,
    pub relay: Option<RelaySpec>,
    /// The run CA's trust files on the host (`None`: no TLS interception, nothing mounted).
    pub trust: Option<TrustFiles>,
    /// envgit's own binary, mounted read-only at [`ENVGIT_INSIDE`] for hooks that run inside
    /// (the host path may be invisible there, e.g. under the host's /tmp).
    pub envgit_exe: Option<PathBuf>,
    /// Protected paths relative to the project (the policy's list and `core.hooksPath`).
    pub protected: Vec<String>,
    /// Credential files the caller found elsewhere (git's credential store where the person's
    /// configuration moves it): masked.
    pub more_masks: Vec<PathBuf>,
    /// From envgit's stat index ([`project_facts`]): the project's secrets to mask and its
    /// files with hard links outside it, made read-only.
    pub facts: ProjectFacts,
    /// [`etc_private`], when the caller walked `/etc` already (on another thread, while it
    /// set the rest of the run up: the walk is the plan's largest cost); `None`: walked here.
    pub etc_private: Option<Vec<PathBuf>>,
    /// [`system_dirs`], when the caller found them already (for the zygote's early base: each
    /// costs ~50 `readlink`s); `None`: found here.
    pub system: Option<Vec<PathBuf>>,
}

/// Whether `p` lies in one of the system directories (already in the view).
fn in_system_dirs(p: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| p.starts_with(d))
}

/// The toolchain home a PATH entry belongs to: `…/.pyenv/…` → `…/.pyenv`, `…/.nvm/versions/
/// node/V/bin` → that version, `…/.cargo/bin` → itself and the sibling `.rustup`; any other
/// entry → itself. Only these are shown, read-only, never the home they sit in.
fn toolchain_of(entry: &Path) -> Vec<PathBuf> {
    let comps: Vec<_> = entry.components().collect();
    let upto = |i: usize| comps[..=i].iter().collect::<PathBuf>();
    for (i, c) in comps.iter().enumerate() {
        let name = c.as_os_str().to_str().unwrap_or("");
        match name {
            ".pyenv" | ".rbenv" | ".sdkman" | ".volta" | ".bun" | ".deno" | ".rustup" => {
                return vec![upto(i)];
            }
            ".nvm" => {
                let end = (i + 3).min(comps.len() - 1);
                return vec![upto(end)];
            }
            ".cargo" => {
                let mut out = vec![entry.to_path_buf()];
                if i > 0 {
                    out.push(upto(i - 1).join(".rustup"));
                }
                return out;
            }
            _ => {}
        }
    }
    vec![entry.to_path_buf()]
}

/// A PATH entry that would show far more than a toolchain: `/`, a top-level directory
/// (`/home`, `/root`, `/var`, …) or a whole home (`/home/NAME`). Such entries are left out.
fn too_broad(p: &Path) -> bool {
    let n = p.components().count();
    n <= 2 || (p.starts_with("/home") && n <= 3)
}

/// Toolchain directories outside the system directories that PATH (or a toolchain variable)
/// names and the view would otherwise miss: read-only, canonical, existing, deduplicated.
/// Those inside the project or the overlaid home are already visible.
pub fn toolchain_dirs(
    caller_env: &[(String, String)],
    project: &Path,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let get = |k: &str| {
        caller_env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let mut wanted: Vec<PathBuf> = Vec::new();
    for entry in get("PATH").unwrap_or("").split(':') {
        if entry.starts_with('/') {
            wanted.extend(toolchain_of(Path::new(entry)));
        }
    }
    for var in TOOLCHAIN_VARS {
        if let Some(v) = get(var).filter(|v| v.starts_with('/')) {
            wanted.push(PathBuf::from(v));
        }
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for w in wanted {
        let Ok(real) = w.canonicalize() else { continue };
        if !real.is_dir()
            || too_broad(&real)
            || in_system_dirs(&real)
            || real.starts_with(project)
            || home.is_some_and(|h| real.starts_with(h))
        {
            continue;
        }
        if !out.iter().any(|o| real.starts_with(o)) {
            out.retain(|o| !o.starts_with(&real));
            out.push(real);
        }
    }
    out.sort();
    out
}

/// Everything under `/etc` that others may not read (`shadow`, `ssh_host_*_key`,
/// `ssl/private`, …): masked, so the sandbox never reads what only root may.
pub fn etc_private() -> Vec<PathBuf> {
    crate::etc_cache::private_below(Path::new("/etc"))
}

/// The host's pathname unix sockets (`/proc/net/unix` of envgit's network namespace) that
/// lie where the view reaches (`visible`): each is masked, so a socket some host service
/// listens on in the project, the home or a toolchain directory cannot be connected to.
/// Everywhere else host sockets are simply not in the view (`/run`, `/var/run`, `/tmp`,
/// `$XDG_RUNTIME_DIR`, the rest of `/var` are private or absent). Limit on kernels before
/// Linux 7.1 (Landlock ABI 9, which `landlock_rules` asks for best effort): a socket a host
/// process binds inside the project or the home *after* the step started is not masked;
/// seccomp cannot see a `connect` target, so nothing else closes that gap there.
pub(crate) fn host_sockets(visible: &[PathBuf]) -> Vec<PathBuf> {
    bound_sockets(Path::new("/proc/net/unix"))
        .into_iter()
        .filter(|p| visible.iter().any(|v| p.starts_with(v)))
        .collect()
}

/// The absolute paths pathname unix sockets are bound at in the network namespace whose
/// `/proc/…/net/unix` table is `table` (a relative bind path says nothing of where it is).
pub(crate) fn bound_sockets(table: &Path) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string(table) else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

/// The policy's `filesystem.allow_write` paths as the sandbox binds them read-write: `~`
/// expanded against `home`, resolved; those that do not exist are left out.
pub fn allow_write_paths(policy: &Policy, home: Option<&Path>) -> Vec<PathBuf> {
    policy
        .filesystem
        .allow_write
        .iter()
        .map(|w| {
            home.and_then(|h| expand_home(w, h))
                .unwrap_or_else(|| PathBuf::from(w))
        })
        .filter_map(|p| p.canonicalize().ok())
        .collect()
}

fn expand_home(p: &str, home: &Path) -> Option<PathBuf> {
    if p == "~" {
        return Some(home.to_path_buf());
    }
    p.strip_prefix("~/").map(|rest| home.join(rest))
}

/// Every path to mask: the defaults, `filesystem.deny_read` and `.env` files (the project's
/// from its index, the homes' by a bounded walk), with symlinked paths masked at their
/// resolved target too: what is at `secrets`' places (found from `input`), `/etc`'s files
/// others may not read, and the project's.
fn masks(input: &PlanInput<'_>, secrets: &HostSecrets) -> Vec<PathBuf> {
    let mut out = secrets.unresolved();
    match &input.etc_private {
        Some(private) => out.extend(private.iter().cloned()),
        None => out.extend(etc_private()),
    }
    // The project's `.env` files and deny_read glob matches, at any depth, from the index.
    out.extend(input.facts.secrets.iter().cloned());
    existing_and_resolved(out)
}

/// What of `paths` exists, sorted: what is not there is not masked, and a symlinked secret is
/// masked where it really lives too.
pub(crate) fn existing_and_resolved(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.retain(|p| p.symlink_metadata().is_ok());
    let resolved = resolve_all(&paths);
    paths.extend(resolved);
    paths.sort();
    paths.dedup();
    paths
}

/// The secrets of the homes a sandbox sees: [`HOME_DENIES`] that exist, `filesystem.deny_read`'s
/// `~/` entries, and what one bounded walk of each home finds (`.env` files, sockets,
/// `deny_read`'s `~/` globs), each that exists and, for one that is a link or under one, its
/// real path too. The plan masks them; a session that keeps one sandbox looks again before
/// each call for those made since.
pub fn home_secrets(homes: &[PathBuf], policy: &Policy) -> Vec<PathBuf> {
    existing_and_resolved(home_secrets_unresolved(homes, &policy.filesystem.deny_read))
}

/// [`home_secrets`] before links are resolved, `deny_read` being the policy's
/// `filesystem.deny_read`.
pub(crate) fn home_secrets_unresolved(homes: &[PathBuf], deny_read: &[String]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for home in homes {
        // Most are absent: one listing of the home rules out those whose first component is
        // not there, before each of the others is looked at below.
        let names = names_in(home);
        out.extend(
            HOME_DENIES
                .iter()
                .filter(|d| may_exist(names.as_ref(), d))
                .map(|d| home.join(d)),
        );
    }
    let mut globs: Vec<(PathBuf, String)> = Vec::new();
    for rest in deny_read.iter().filter_map(|d| d.strip_prefix("~/")) {
        for home in homes {
            if rest.contains(['*', '?', '[']) {
                globs.push((home.clone(), rest.to_string()));
            } else {
                out.push(home.join(rest));
            }
        }
    }
    // The homes' by one bounded walk of each.
    let roots = homes.iter().map(|h| (h.clone(), HOME_SEARCH_DEPTH, true));
    for (root, max_depth, skip_hidden) in roots {
        let mut b = GitignoreBuilder::new(&root);
        for (base, pat) in &globs {
            if base == &root {
                let _ = b.add_line(None, pat);
            }
        }
        let matcher = b.build().ok();
        walk(&root, max_depth, skip_hidden, &mut |p, file_type| {
            use std::os::unix::fs::FileTypeExt;
            let is_dir = file_type.is_dir();
            // Bytes: a name that is not UTF-8 (`.env.\xff`) is still a `.env` file.
            let name = p
                .file_name()
                .map(std::os::unix::ffi::OsStrExt::as_bytes)
                .unwrap_or_default();
            // A socket: a host service listening on it, however it was bound (`/proc/net/unix`
            // shows neither a relative path nor another network namespace's).
            let hit = file_type.is_socket()
                || (!is_dir
                    && (envgit_policy::is_env_file(name)
                        || (!skip_hidden && envgit_policy::is_secret_name(name))))
                || matcher
                    .as_ref()
                    .is_some_and(|m| m.matched(p, is_dir).is_ignore());
            if hit {
                out.push(p.to_path_buf());
            }
        });
    }
    out
}

/// Where each of `paths` really is, for those whose real path differs (a link, or under one).
/// Most share a few parents (`~`, `/etc/ssl`): each parent is resolved once, and a path
/// that is no link itself is its real parent joined with its name (one `lstat`, where a
/// `realpath` of its own reads every component again).
fn resolve_all(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut parents: std::collections::HashMap<&Path, Option<PathBuf>> =
        std::collections::HashMap::new();
    let mut resolved = Vec::new();
    for p in paths {
        let whole = || p.canonicalize().ok();
        let real = match (p.parent(), p.file_name(), p.symlink_metadata()) {
            (Some(parent), Some(name), Ok(meta)) if !meta.file_type().is_symlink() => parents
                .entry(parent)
                .or_insert_with(|| parent.canonicalize().ok())
                .as_ref()
                .map(|real_parent| real_parent.join(name)),
            _ => whole(),
        };
        if let Some(real) = real
            && &real != p
        {
            resolved.push(real);
        }
    }
    resolved
}

fn walk(
    dir: &Path,
    depth_left: usize,
    skip_hidden: bool,
    f: &mut dyn FnMut(&Path, std::fs::FileType),
) {
    if depth_left == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let p = e.path();
        let name = e.file_name();
        let name = name.to_str().unwrap_or("");
        // `.git` is skipped (its objects are data), and in the home the hidden directories
        // (caches, toolchains).
        let skip = name == ".git" || (skip_hidden && name.starts_with('.'));
        f(&p, ft);
        if ft.is_dir() && !skip {
            walk(&p, depth_left - 1, skip_hidden, f);
        }
    }
}

fn environment(input: &PlanInput<'_>) -> Vec<(String, String)> {
    let pass = &input.policy.env.pass;
    let mut env: Vec<(String, String)> = input
        .caller_env
        .iter()
        .filter(|(k, _)| SAFE_ENV.contains(&k.as_str()) || k.starts_with("LC_") || pass.contains(k))
        .cloned()
        .collect();
    // Registry mirrors reach the sandbox unless they carry a credential (the supervisor
    // prints those refusals); so do those the masked ~/.npmrc, pip.conf and project .npmrc
    // name, as the same variables.
    let home = input.homes.first().map(PathBuf::as_path);
    let mut wanted =
        crate::registry_env::from_masked_config(home, input.project, &input.caller_env);
    wanted.extend(input.caller_env.iter().cloned());
    let (registries, _refused) = crate::registry_env::split(&wanted);
    for (k, v) in registries {
        env.retain(|(e, _)| *e != k);
        env.push((k, v));
    }
    env.retain(|(k, _)| k != "TMPDIR" && k != "PWD");
    env.push(("TMPDIR".into(), "/tmp".into()));
    env.push(("PWD".into(), input.cwd.display().to_string()));
    let trust_env = input.trust.as_ref().map(|_| {
        trust::trust_env(&TrustFiles {
            bundle: Path::new("/run/envgit").join(BUNDLE_NAME),
            ca: Path::new("/run/envgit").join(CA_NAME),
        })
    });
    for (k, v) in trust_env.iter().flatten().chain(&input.extra_env) {
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

/// Where envgit's own binary is inside the sandbox.
pub const ENVGIT_INSIDE: &str = "/run/envgit/envgit";

/// The trust files' names under `/run/envgit` inside the sandbox.
const BUNDLE_NAME: &str = "ca-bundle.pem";
const CA_NAME: &str = "run-ca.pem";

/// The sandbox `input` describes.
pub fn plan(input: PlanInput<'_>) -> Spec {
    plan_keeping_secrets(input).0
}

/// [`plan`], and where it found the secrets outside the project it masks: a session that
/// keeps one sandbox looks there again before each call.
pub fn plan_keeping_secrets(input: PlanInput<'_>) -> (Spec, HostSecrets) {
    let protected = present(input.project, &input.protected);
    let writable = allow_write_paths(input.policy, input.homes.first().map(PathBuf::as_path));
    let home = home_overlay(&input.homes, input.home_overlay.as_ref());
    let system = input.system.clone().unwrap_or_else(|| {
        system_dirs(
            &input.caller_env,
            input.project,
            input.homes.first().map(PathBuf::as_path),
        )
    });
    let secrets = HostSecrets::of(&input, &system);
    let spec = Spec {
        argv: input.argv.clone(),
        cwd: input.cwd.clone(),
        env: environment(&input),
        uid: input.uid,
        gid: input.gid,
        staging: input.staging.clone(),
        masks: masks(&input, &secrets),
        system,
        project: input.project.to_path_buf(),
        cgroups: Vec::new(),
        nproc: 0,
        terminal_stdio: [true; 3],
        home,
        git: None,
        writable,
        read_only: protected
            .into_iter()
            .chain(hard_linked(&input.facts))
            .collect(),
        hidden: input.state_dirs.clone(),
        resolv_conf: "nameserver 127.0.0.1\noptions ndots:0 attempts:1\n".into(),
        relay: input.relay.clone(),
        file_overrides: input
            .trust
            .as_ref()
            .map(|t| trust::bundle_overrides(&t.bundle))
            .unwrap_or_default(),
        run_files: Vec::new(),
        base_run_files: base_run_files(input.trust.as_ref(), input.envgit_exe.as_deref()),
    };
    (spec, secrets)
}

/// The protected paths (relative to `project`) that exist, to be bound read-only. Most of
/// the ~70 are absent, which one listing of the project's root shows for all but those under
/// a name it has: each `lstat` is a system call (~2.5 µs on the machines measured). A pattern
/// (`*.code-workspace`) is not a path: its matches come listed among the others.
fn present(project: &Path, protected: &[String]) -> Vec<PathBuf> {
    let names = names_in(project);
    protected
        .iter()
        .filter(|p| !p.contains('*') && may_exist(names.as_ref(), p))
        .map(|p| project.join(p))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect()
}

/// The names in `dir`; `None` when it cannot be listed (then nothing is ruled out).
fn names_in(dir: &Path) -> Option<std::collections::HashSet<std::ffi::OsString>> {
    let list = std::fs::read_dir(dir).ok()?;
    Some(list.flatten().map(|e| e.file_name()).collect())
}

/// Whether `rel` (relative, `/`-separated) may exist below a directory whose names are
/// `names`: its first component is one of them, or they are unknown.
fn may_exist(names: Option<&std::collections::HashSet<std::ffi::OsString>>, rel: &str) -> bool {
    let first = rel.split('/').next().unwrap_or(rel);
    names.is_none_or(|n| n.contains(std::ffi::OsStr::new(first)))
}

/// The files under `/run/envgit` that are the same for a project's steps
/// ([`Spec::base_run_files`]): the trust files and envgit's own binary.
pub fn base_run_files(
    trust: Option<&TrustFiles>,
    envgit_exe: Option<&Path>,
) -> Vec<(String, PathBuf)> {
    let trust = trust.into_iter().flat_map(|t| {
        [
            (BUNDLE_NAME.to_owned(), t.bundle.clone()),
            (CA_NAME.to_owned(), t.ca.clone()),
        ]
    });
    let exe = envgit_exe.map(|e| ("envgit".to_owned(), e.to_path_buf()));
    trust.chain(exe).collect()
}

/// Files with hard links outside the project: bound read-only over themselves, like the
/// protected paths, so a write through the link cannot change the file outside. (The mount
/// itself is `mounts::read_only`, which opens each beneath the new root without following a
/// symlink and skips what is gone.)
fn hard_linked(facts: &ProjectFacts) -> impl Iterator<Item = PathBuf> + '_ {
    facts.linked_out.iter().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_the_environment_moves_are_found_where_it_says() {
        let env: Vec<(String, String)> = [
            ("KUBECONFIG", "/k/a.yaml::rel/b.yaml"),
            ("DOCKER_CONFIG", "/d"),
            ("XDG_CONFIG_HOME", "/x"),
            ("GNUPGHOME", ""),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let got = env_denies(&env, Path::new("/cwd"));
        for want in [
            "/k/a.yaml",
            "/cwd/rel/b.yaml",
            "/d/config.json",
            "/x/gh",
            "/x/git/credentials",
        ] {
            assert!(got.contains(&PathBuf::from(want)), "{want}: {got:?}");
        }
        assert!(
            !got.iter()
                .any(|p| p.starts_with("/cwd/.gnupg") || p == Path::new("/cwd"))
        );
    }

    #[test]
    fn toolchains_path_names_and_nothing_broader() {
        assert_eq!(
            toolchain_of(Path::new("/root/.pyenv/plugins/pyenv-virtualenv/shims")),
            vec![PathBuf::from("/root/.pyenv")]
        );
        assert_eq!(
            toolchain_of(Path::new("/root/.cargo/bin")),
            vec![
                PathBuf::from("/root/.cargo/bin"),
                PathBuf::from("/root/.rustup")
            ]
        );
        assert_eq!(
            toolchain_of(Path::new("/home/a/.nvm/versions/node/v22.1.0/bin")),
            vec![PathBuf::from("/home/a/.nvm/versions/node/v22.1.0")]
        );
        assert!(too_broad(Path::new("/")));
        assert!(too_broad(Path::new("/root")));
        assert!(too_broad(Path::new("/home/alice")));
        assert!(!too_broad(Path::new("/home/alice/bin")));
        assert!(!too_broad(Path::new("/root/.cargo")));
        let env = vec![(
            "PATH".to_owned(),
            "/root:/home:/var:/usr/bin:/root/.cargo/bin".to_owned(),
        )];
        let dirs = toolchain_dirs(&env, Path::new("/nonexistent-project"), None);
        for d in &dirs {
            assert!(
                d.starts_with("/root/.cargo/bin") || d.starts_with("/root/.rustup"),
                "{d:?}"
            );
        }
    }

    #[test]
    fn masks_are_resolved_through_links_at_any_component() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("real/home/.ssh")).unwrap();
        std::fs::write(root.join("real/home/.ssh/id"), "k").unwrap();
        std::fs::write(root.join("real/secret"), "s").unwrap();
        std::os::unix::fs::symlink(root.join("real/home"), root.join("home")).unwrap();
        std::os::unix::fs::symlink(root.join("real/secret"), root.join("real/home/.env")).unwrap();
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("real/home/dangling")).unwrap();
        let paths = [
            root.join("home/.ssh/id"),           // under a linked parent
            root.join("home/.env"),              // a link under a linked parent
            root.join("real/home/.ssh/../.env"), // a `..` in the parent
            root.join("real/home/.ssh"),         // already real
            root.join("real/home/dangling"),     // leads nowhere
            root.join("home"),                   // a link itself
        ];
        assert_eq!(
            resolve_all(&paths),
            vec![
                root.join("real/home/.ssh/id"),
                root.join("real/secret"),
                root.join("real/secret"),
                root.join("real/home"),
            ]
        );
        let by_realpath: Vec<PathBuf> = paths
            .iter()
            .filter_map(|p| p.canonicalize().ok().filter(|r| r != p))
            .collect();
        assert_eq!(resolve_all(&paths), by_realpath);
    }

    #[test]
    fn the_protected_paths_bound_are_those_that_exist() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("ci/github")).unwrap();
        std::os::unix::fs::symlink("ci/github", root.join(".github")).unwrap();
        std::fs::create_dir_all(root.join("ci/github/workflows")).unwrap();
        std::fs::write(root.join("a.code-workspace"), "{}").unwrap();
        let protected: Vec<String> = [
            ".git/hooks",
            ".git/config",
            ".github/workflows",
            ".vscode",
            ".config/mise.toml",
            "*.code-workspace",
            "a.code-workspace",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            present(root, &protected),
            vec![
                root.join(".git/hooks"),
                root.join(".github/workflows"),
                root.join("a.code-workspace"),
            ]
        );
    }

    #[test]
    fn env_files() {
        assert!(envgit_policy::is_env_file(b".env"));
        assert!(envgit_policy::is_env_file(b".env.local"));
        assert!(envgit_policy::is_env_file(b".env.production"));
        assert!(!envgit_policy::is_env_file(b".env.example"));
        assert!(!envgit_policy::is_env_file(b".env.sample"));
        assert!(!envgit_policy::is_env_file(b".envrc"));
        assert!(!envgit_policy::is_env_file(b"env"));
    }
}
