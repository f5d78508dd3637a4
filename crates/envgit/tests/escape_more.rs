//! More of the escape suite (`escape.rs`): attacks found by a later review, each run for real
//! inside `envgit run`, asserting that it failed and its target is unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;

use support::Env;

const CANARY: &str = "CANARY-5d1e07-secret-key-material";

fn project() -> Env {
    let env = Env::new();
    env.write("src/main.txt", "hello");
    env.sh("git init -q . && git add -A && git commit -qm init")
        .ok();
    env.init();
    env
}

/// A step plants an empty `.env` file for the person to fill in ("put your API key here"),
/// and hard links to it under other names: in the project, and in a directory the snapshot
/// excludes (`node_modules/`). The person writes the key into the file in place (`>>`, or an
/// editor that keeps a linked file's inode, as Vim does), and the next step reads it through
/// a link: the mask covers the secret's name, and a hard link is the same file by another.
#[test]
fn a_hard_link_planted_beside_a_secret_does_not_reach_it() {
    let env = project();
    env.attack(
        "mkdir -p config node_modules/.cache && : > config/.env.local && \
         ln config/.env.local config/README && ln config/.env.local node_modules/.cache/x && \
         : > .env && ln .env notes.txt && ls -li config node_modules/.cache",
    );
    for secret in ["config/.env.local", ".env"] {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(env.path(secret))
            .unwrap();
        writeln!(f, "API_KEY={CANARY}").unwrap();
    }
    let r = env.attack(
        "cat config/.env.local; echo direct=$?; cat config/README; echo readme=$?; \
         cat node_modules/.cache/x; echo cache=$?; cat notes.txt; echo notes=$?",
    );
    r.assert_lacks(CANARY);
    for what in ["direct", "readme", "cache", "notes"] {
        assert!(
            !r.stdout.contains(&format!("{what}=0\n")),
            "{what} read the secret's file: {}{}",
            r.stdout,
            r.stderr
        );
    }
    assert!(
        env.read("config/.env.local").contains(CANARY),
        "the secret changed"
    );
}

/// `script` run in a step on a terminal: what reached the person's terminal, checked to hold
/// none of `gone` and each of `kept`.
fn on_terminal_shows(env: &Env, script: &str, gone: &[&str], kept: &[&str]) {
    let out = env
        .on_terminal("never-asked", "", &["run", "--"])
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("EXIT=0"), "{shown:?}");
    for gone in gone {
        assert!(
            !shown.contains(gone),
            "{gone:?} reached the terminal: {shown:?}"
        );
    }
    for kept in kept {
        assert!(
            shown.contains(kept),
            "{kept:?} did not reach the terminal: {shown:?}"
        );
    }
}

/// Terminals read an OSC's number as a number: `OSC 052` is a clipboard write to xterm,
/// kitty and foot (kitty reads up to five digits with `utoi`), `OSC 01337` iTerm2's file
/// download, `OSC 010` the default foreground. The relay's filter must judge the number a
/// terminal acts on, not its spelling.
#[test]
fn an_osc_number_spelled_with_leading_zeros_never_leaves_the_relay() {
    let env = Env::new();
    env.init();
    let script = "printf 'a\\033]052;c;ZWNobyBvd25lZA==\\007b\\n'; \
                  printf 'c\\033]0052;c;eA==\\033\\\\d\\n'; \
                  printf 'e\\033]01337;File=name=eA==;inline=0:aGk=\\007f\\n'; \
                  printf 'g\\033]010;#000000\\007h\\n'; \
                  printf 'i\\033]000527;c;eA==\\007j\\n'; \
                  printf 'k\\033]09;run envgit approve 1\\007l\\n'";
    on_terminal_shows(
        &env,
        script,
        &[
            "]052;",
            "]0052;",
            "ZWNobyBvd25lZA",
            "]01337;",
            "]010;",
            "]000527;",
            "]09;",
        ],
        &["ab\r\n", "cd\r\n", "ef\r\n", "gh\r\n", "ij\r\n", "kl\r\n"],
    );
}

/// Plaintext credentials well-known tools keep in the home, beyond those `escape.rs` checks:
/// the home is visible through its overlay, so each file the list misses is readable inside.
/// s3cmd's and boto's keys, sops' age keys, dbt's database profiles, Poetry's and uv's index
/// passwords, Composer's, Bundler's, NuGet's and sbt's registry credentials, the flyctl,
/// Databricks, Pulumi, doctl, Wrangler, Netlify, Vercel, ngrok, Hetzner, MinIO, OCI,
/// Snowflake and Firebase CLIs' tokens, Gemini CLI's login, Terraform's `.terraformrc` and
/// atuin's shell history.
#[test]
fn more_home_credential_files_are_masked() {
    let env = project();
    let home = env.user_home();
    let files = [
        ".s3cfg",
        ".boto",
        ".config/sops/age/keys.txt",
        ".dbt/profiles.yml",
        ".config/pypoetry/auth.toml",
        ".local/share/uv/credentials/credentials.toml",
        ".config/composer/auth.json",
        ".composer/auth.json",
        ".bundle/config",
        ".nuget/NuGet/NuGet.Config",
        ".sbt/.credentials",
        ".ivy2/.credentials",
        ".fly/config.yml",
        ".databrickscfg",
        ".pulumi/credentials.json",
        ".config/doctl/config.yaml",
        ".wrangler/config/default.toml",
        ".config/.wrangler/config/default.toml",
        ".config/netlify/config.json",
        ".local/share/com.vercel.cli/auth.json",
        ".config/ngrok/ngrok.yml",
        ".ngrok2/ngrok.yml",
        ".config/hcloud/cli.toml",
        ".mc/config.json",
        ".oci/config",
        ".snowflake/connections.toml",
        ".snowsql/config",
        ".config/configstore/firebase-tools.json",
        ".gemini/oauth_creds.json",
        ".terraformrc",
        ".local/share/atuin/history.db",
    ];
    for rel in files {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, CANARY).unwrap();
    }
    let script: String = files
        .iter()
        .enumerate()
        .map(|(i, rel)| format!("cat ~/{rel} 2>/dev/null; echo m{i}=$?\n"))
        .collect();
    let r = env.attack(&script);
    let readable: Vec<&str> = files
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            !r.stdout.contains(&format!("m{i}=")) || r.stdout.contains(&format!("m{i}=0\n"))
        })
        .map(|(_, rel)| *rel)
        .collect();
    assert!(readable.is_empty(), "readable inside: {readable:?}");
    r.assert_lacks(CANARY);
}

/// A multiplexer hands a DCS's payload to the terminal outside it: tmux its `tmux;` ones,
/// which it finds after parameters and intermediates too (`ESC P 1 tmux;`), GNU screen any
/// DCS. A clipboard write carried in one with the C1 introducer (`U+009D`, which needs no
/// escape inside the string) reaches the terminal outside as an OSC 52.
#[test]
fn a_c1_osc_inside_a_dcs_a_multiplexer_passes_on_never_leaves_the_relay() {
    let env = Env::new();
    env.init();
    let script = "printf 'a\\033P1tmux;\\302\\23552;c;ZWNobyBvd25lZA==\\007\\033\\\\b\\n'; \
                  printf 'c\\033P$tmux;\\302\\23552;c;eA==\\007\\033\\\\d\\n'; \
                  printf 'e\\033P\\302\\23552;c;eA==\\007\\033\\\\f\\n'";
    on_terminal_shows(
        &env,
        script,
        &["tmux;", "\u{9d}52", "ZWNobyBvd25lZA", "eA=="],
        &["ab\r\n", "cd\r\n", "f\r\n"],
    );
}

/// The same through a directory `filesystem.deny_read` masks (a literal path, or a glob that
/// names a directory) once it exists: a file below it is a secret too, and so is each of its
/// other links.
#[test]
fn a_hard_link_to_a_file_below_a_denied_directory_does_not_reach_it() {
    let env = project();
    let yaml = env.read("envgit.yaml").replace(
        "# filesystem:\n#   deny_read:",
        "filesystem:\n  deny_read: [\"private\", \"vault*/\"]\n#   deny_read:",
    );
    env.write("envgit.yaml", &yaml);
    // The step makes the directories (absent, nothing masks them yet) with a file each for
    // the person to fill in, and a link to each outside them.
    env.attack(
        "mkdir private vault1 && : > private/api.key && ln private/api.key copy1 && \
         : > vault1/db.key && ln vault1/db.key copy2; echo planted=$?",
    );
    for secret in ["private/api.key", "vault1/db.key"] {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(env.path(secret))
            .unwrap();
        writeln!(f, "KEY={CANARY}").unwrap();
    }
    let r = env.attack("cat copy1; echo copy1=$?; cat copy2; echo copy2=$?");
    r.assert_lacks(CANARY);
}

/// Cloudflare Wrangler keeps a project's local secrets in `.dev.vars` (and `.dev.vars.ENV`),
/// read as `.env` is: masked like `.env` at any depth; its example stays readable.
#[test]
fn wranglers_dev_vars_are_masked_like_env_files() {
    let env = project();
    env.write(".dev.vars", &format!("API_TOKEN={CANARY}\n"));
    env.write(
        "workers/api/.dev.vars.staging",
        &format!("API_TOKEN={CANARY}\n"),
    );
    env.write(".dev.vars.example", "API_TOKEN=\n");
    let r = env.attack(
        "cat .dev.vars; echo a=$?; cat workers/api/.dev.vars.staging; echo b=$?; \
         cat .dev.vars.example; echo example=$?",
    );
    r.assert_lacks(CANARY);
    assert!(r.stdout.contains("example=0\n"), "{}", r.stdout);
}

/// A file in an excluded directory that is a hard link to a file outside the project (pnpm's
/// `node_modules/`, linked to the store every project of the person's shares): a write through
/// it would change the file outside, which the person's other projects then run on the host.
/// The project gets its own copy, which the step's write changes.
#[test]
fn a_hard_link_in_an_excluded_directory_cannot_change_the_file_outside() {
    let env = project();
    let store = env
        .tmp
        .path()
        .join("userhome/.local/share/pnpm/store/v3/files/00");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("index.js"), "module.exports = 1;\n").unwrap();
    std::fs::create_dir_all(env.path("node_modules/lodash")).unwrap();
    std::fs::hard_link(
        store.join("index.js"),
        env.path("node_modules/lodash/index.js"),
    )
    .unwrap();
    let r = env.attack(
        "echo 'require(\"child_process\").execSync(\"id\")' >> node_modules/lodash/index.js; \
         echo wrote=$?",
    );
    assert!(r.stdout.contains("wrote=0\n"), "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(store.join("index.js")).unwrap(),
        "module.exports = 1;\n",
        "the store's file outside the project changed"
    );
    assert!(
        env.read("node_modules/lodash/index.js")
            .contains("execSync"),
        "the step's write went nowhere"
    );
    assert!(r.stderr.contains("the project's own copy"), "{}", r.stderr);
}

/// The same for a uv `.venv/`, linked file by file to uv's cache, at depth, and for a link
/// the person's tools make on the host between two steps, in a directory an earlier step
/// listed already: each becomes the project's own copy, with its mode and times, and the
/// files outside stay as they were.
#[test]
fn links_of_a_venv_and_links_made_between_steps_cannot_change_the_files_outside() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let env = project();
    let cache = env.tmp.path().join("userhome/.cache/uv/archive-v0/abc");
    std::fs::create_dir_all(&cache).unwrap();
    let site = ".venv/lib/python3.11/site-packages";
    std::fs::write(cache.join("__init__.py"), "import os\n").unwrap();
    std::fs::write(cache.join("tool"), "#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(cache.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(env.path(&format!("{site}/requests"))).unwrap();
    std::fs::create_dir_all(env.path(".venv/bin")).unwrap();
    let link = |from: &str, to: &str| std::fs::hard_link(cache.join(from), env.path(to)).unwrap();
    link("__init__.py", &format!("{site}/requests/__init__.py"));
    link("tool", ".venv/bin/tool");
    // Each of `files` (relative to the project) appended to in a step, which must succeed;
    // the cache's file of each name (`cached`) must hold what it held.
    let append_to = |files: &[String], cached: &[(&str, &str)]| {
        let script: String = files
            .iter()
            .map(|f| format!("echo '# more' >> {f} && "))
            .collect();
        let r = env.attack(&format!("{script}echo appended"));
        assert!(r.stdout.contains("appended\n"), "{}{}", r.stdout, r.stderr);
        for (name, was) in cached {
            assert_eq!(&std::fs::read_to_string(cache.join(name)).unwrap(), was);
        }
    };
    append_to(
        &[
            format!("{site}/requests/__init__.py"),
            ".venv/bin/tool".into(),
        ],
        &[
            ("__init__.py", "import os\n"),
            ("tool", "#!/bin/sh\necho tool\n"),
        ],
    );
    // The copies kept what the links had: the tool still runs, as the person's.
    let tool = std::fs::metadata(env.path(".venv/bin/tool")).unwrap();
    assert_eq!(tool.mode() & 0o7777, 0o755);
    assert_eq!(tool.nlink(), 1);
    // A link made on the host after that step, in a directory its listing holds, and one in
    // a new directory.
    std::fs::write(cache.join("api.py"), "API = 1\n").unwrap();
    std::fs::write(cache.join("core.py"), "CORE = 1\n").unwrap();
    link("api.py", &format!("{site}/requests/api.py"));
    std::fs::create_dir_all(env.path(&format!("{site}/urllib3"))).unwrap();
    link("core.py", &format!("{site}/urllib3/core.py"));
    append_to(
        &[
            format!("{site}/requests/api.py"),
            format!("{site}/urllib3/core.py"),
        ],
        &[("api.py", "API = 1\n"), ("core.py", "CORE = 1\n")],
    );
    // A link no step writes to: its copy keeps the times and owner the link had.
    std::fs::write(cache.join("util.py"), "U = 1\n").unwrap();
    link("util.py", &format!("{site}/requests/util.py"));
    let before = std::fs::metadata(cache.join("util.py")).unwrap();
    env.attack("true");
    let after = std::fs::metadata(env.path(&format!("{site}/requests/util.py"))).unwrap();
    assert_eq!(after.nlink(), 1, "not made a copy of its own");
    assert_eq!(
        (after.mtime(), after.mtime_nsec(), after.uid(), after.gid()),
        (
            before.mtime(),
            before.mtime_nsec(),
            before.uid(),
            before.gid()
        )
    );
}
