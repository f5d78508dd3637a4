//! Which approvals the gate must tie to the whole body.

use crate::default_preset_ids;

use super::policy;

#[test]
fn identity_needs_whole_body_where_the_summary_does_not_name_the_effect() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"api.example.com\", method: POST }\n    action: ask\n  - net: { host: \"chat.example.com\" }\n    action: ask\n    id: git.push\n  - preset: default\n",
    );
    let rows: &[(&str, bool)] = &[
        // the user's rules, whatever their id: a user rule named like a preset entry too
        ("net.0", true),
        ("git.push", true),
        // the preset's own entry at index 2 has no `net.2` id: unknown, like `l7` refusals
        ("net.2", true),
        ("l7.api.example.com", true),
        ("nope", true),
        ("oci.push", false),
    ];
    for (id, want) in rows {
        assert_eq!(p.identity_needs_whole_body(id), *want, "{id}");
    }
    let d = crate::Policy::default();
    let named = [
        "git.push",
        "npm.publish",
        "npm.dist-tag",
        "pypi.upload",
        "crates.publish",
        "crates.yank",
        "crates.owners",
        "oci.push",
        "oci.delete",
    ];
    for id in default_preset_ids() {
        assert_eq!(
            d.identity_needs_whole_body(id),
            !named.contains(&id),
            "{id}"
        );
    }
    assert!(d.identity_needs_whole_body("github.graphql.mutation"));
    assert!(d.identity_needs_whole_body("github.rest.write"));
    assert!(!d.identity_needs_whole_body("pypi.upload"));
}

#[test]
fn only_the_parts_of_an_oci_push_share_an_approval_across_queries() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"api.example.com\", method: POST }\n    action: ask\n    id: oci.push\n  - preset: default\n",
    );
    // A user's rule named like the preset's entry binds its query.
    assert!(!p.identity_ignores_query("oci.push"));
    let d = crate::Policy::default();
    for id in default_preset_ids() {
        assert_eq!(d.identity_ignores_query(id), id == "oci.push", "{id}");
    }
    assert!(!d.identity_ignores_query("net.0"));
    assert!(!d.identity_ignores_query("nope"));
}
