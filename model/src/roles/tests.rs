use super::*;
use crate::names::Names;

fn perms(role: Role) -> Permissions {
    Names::new("cronrun").unwrap().permissions(role, "_INBOX.UABC", &["orders.>".into()])
}

/// (role, subject, may publish): the lines of docs/security.md's permission table that matter most.
#[test]
fn roles_publish_only_what_they_need() {
    for &(role, subject, allowed) in PUBLISH_CASES {
        assert_eq!(perms(role).may_publish(subject), allowed, "{} publish {subject}", role.as_str());
    }
}

/// (role, subject, may publish), for `roles_publish_only_what_they_need` and the domain
/// forms' test.
const PUBLISH_CASES: &[(Role, &str, bool)] = {
    use Role::*;
    &[
        (Admin, "$KV.cronrun_jobs.backup", true),
        (Admin, "$O.cronrun_plugins.M.abc", true),
        (Admin, "cronrun.ctl.run.j.r.kill", true),
        (Admin, "$JS.API.STREAM.DELETE.KV_cronrun_jobs", false),
        (Admin, "$KV.other_jobs.x", false),
        (Admin, "$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.x.cronrun.dispatch.a", false),
        (Scheduler, "$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.x.cronrun.dispatch.a", false),
        (Admin, "orders.new", false),
        (Viewer, "$KV.cronrun_jobs.backup", false),
        (Viewer, "$KV.cronrun_runs.j.r", false),
        (Viewer, "cronrun.dispatch.default", false),
        (Viewer, "cronrun.ctl.run.j.r.kill", false),
        (Viewer, "$JS.API.STREAM.INFO.KV_cronrun_jobs", true),
        (Viewer, "$JS.API.CONSUMER.CREATE.KV_cronrun_schedules.x.$KV.cronrun_schedules.7.>", true),
        (Viewer, "$JS.API.STREAM.CREATE.KV_cronrun_schedules", false),
        (Scheduler, "$JS.API.STREAM.CREATE.KV_cronrun_schedules", true),
        (Scheduler, "$JS.API.STREAM.UPDATE.KV_cronrun_schedules", false),
        // Ordered consumers take no acks: no identity needs these.
        (Scheduler, "$JS.ACK.KV_cronrun_schedules.x.1.2.3.4.5.6.7", false),
        (Runner, "$JS.ACK.KV_cronrun_schedules.x.1.2.3.4.5.6.7", false),
        (Scheduler, "$JS.ACK.KV_cronrun_leases.x.1.2.3.4.5.6.7", false),
        (Runner, "$JS.ACK.KV_cronrun_leases.x.1.2.3.4.5.6.7", false),
        (Runner, "$JS.ACK.KV_cronrun_jobs.x.1.2.3.4.5.6.7", false),
        (Runner, "$KV.cronrun_jobs.pwned", false),
        (Runner, "cronrun.ctl.answer.t1", true),
        (Runner, "$JS.ACK.KV_cronrun_runs.chains.1.2.3.4.5.6.7", false),
        (Viewer, "$JS.ACK.KV_cronrun_leases.x.1.2.3.4.5.6.7", false),
        (Admin, "$JS.ACK.KV_cronrun_jobs.x.1.2.3.4.5.6.7", false),
        (Scheduler, "$KV.cronrun_schedules.7.backup", false),
        (Scheduler, "$KV.cronrun_leases.triggers.7", true),
        (Runner, "$KV.cronrun_leases.triggers.7", false),
        (Admin, "$KV.cronrun_schedules.7.backup", false),
        (Runner, "$JS.API.STREAM.INFO.KV_cronrun_schedules", false),
        (Viewer, "$JS.API.STREAM.CREATE.KV_cronrun_jobs", false),
        (Viewer, "$JS.API.STREAM.PURGE.CRONRUN_LOGS", false),
        (Scheduler, "$KV.cronrun_jobs.backup", false),
        (Scheduler, "$KV.cronrun_leases.shard.3", true),
        (Scheduler, "$KV.cronrun_leases.run.j.r", false),
        (Scheduler, "$KV.cronrun_leases.shards", true),
        (Scheduler, "$KV.cronrun_leases.scheduler.a.b", true),
        (Scheduler, "cronrun.dispatch.default", true),
        (Scheduler, "cronrun.ctl.run.j.r.kill", false),
        (Scheduler, "$O.cronrun_plugins.M.abc", false),
        (Scheduler, "$KV.cronrun_snapshots.3.0.1", true),
        (Scheduler, "$JS.API.STREAM.CREATE.KV_cronrun_snapshots", true),
        (Scheduler, "$JS.API.STREAM.PURGE.KV_cronrun_snapshots", false),
        (Scheduler, "$JS.API.STREAM.DELETE.KV_cronrun_snapshots", false),
        (Runner, "$KV.cronrun_snapshots.3", false),
        (Admin, "$KV.cronrun_snapshots.3", false),
        (Viewer, "$JS.API.STREAM.CREATE.KV_cronrun_snapshots", false),
        (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_EVENTS.notify", true),
        (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_EVENTS.other", false),
        (Scheduler, "$JS.ACK.CRONRUN_EVENTS.notify.1.2.3.4.5.6.7", true),
        (Scheduler, "cronrun.notify.ops.alerts", true),
        (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.KV_cronrun_runs.chains", true),
        (Scheduler, "$JS.ACK.KV_cronrun_runs.chains.1.2.3.4.5.6.7", true),
        (Runner, "$JS.API.CONSUMER.MSG.NEXT.KV_cronrun_runs.chains", false),
        (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_MESSAGES.on-orders", true),
        (Scheduler, "cronrun.dead.orders", true),
        (Scheduler, "$JS.API.STREAM.UPDATE.CRONRUN_MESSAGES", false),
        (Admin, "$JS.API.STREAM.UPDATE.CRONRUN_MESSAGES", true),
        (Admin, "$JS.API.STREAM.DELETE.CRONRUN_MESSAGES", false),
        (Runner, "$JS.ACK.CRONRUN_MESSAGES.on-orders.1.2.3.4.5.6.7", false),
        (Viewer, "cronrun.dead.orders", false),
        (Viewer, "$JS.ACK.KV_cronrun_runs.chains.1.2.3.4.5.6.7", false),
        (Runner, "cronrun.notify.ops", false),
        (Viewer, "cronrun.notify.ops", false),
        (Runner, "$KV.cronrun_jobs.backup", false),
        (Runner, "$O.cronrun_plugins.M.abc", false),
        (Runner, "$O.cronrun_plugins.C.abc", false),
        (Runner, "$KV.cronrun_leases.shard.3", false),
        (Runner, "$KV.cronrun_leases.shards", false),
        (Runner, "$KV.cronrun_leases.run.j.r", true),
        (Runner, "$KV.cronrun_leases.wait.j.r", true),
        (Runner, "$KV.cronrun_leases.signed.j", true),
        (Admin, "$KV.cronrun_leases.signed.j", false),
        (Scheduler, "$KV.cronrun_leases.signed.j", false),
        (Viewer, "$KV.cronrun_leases.signed.j", false),
        (Runner, "$KV.cronrun_runs.j.r", true),
        (Runner, "$JS.API.STREAM.CREATE.KV_cronrun_jobs", false),
        (Runner, "$JS.API.STREAM.PURGE.OBJ_cronrun_plugins", false),
        (Runner, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_DISPATCH.pool-a", true),
        // Consumers are made through `CONSUMER.CREATE.<stream>.<name>.<filter>` (what
        // async-nats sends); the older `DURABLE.CREATE` API is granted to no one.
        (Runner, "$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.pool-a.cronrun.dispatch.a", true),
        (Runner, "$JS.API.CONSUMER.DURABLE.CREATE.CRONRUN_DISPATCH.pool-a", false),
        (Scheduler, "$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify.cronrun.events.*.*", true),
        (Scheduler, "$JS.API.CONSUMER.DURABLE.CREATE.CRONRUN_EVENTS.notify", false),
        (Runner, "cronrun.dispatch.default", false),
        (Runner, "orders.new", true),
        (Runner, "payments.new", false),
        // Secrets: admins write and read them; runners and schedulers read one by name
        // (no consumer, no get by sequence); viewers have no route at all.
        (Admin, "$KV.cronrun_secrets.tok", true),
        (Admin, "$JS.API.STREAM.CREATE.KV_cronrun_secrets", true),
        (Admin, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", true),
        (Admin, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", true),
        (Admin, "$JS.API.STREAM.UPDATE.KV_cronrun_secrets", false),
        (Admin, "$JS.API.STREAM.DELETE.KV_cronrun_secrets", false),
        (Admin, "$JS.API.STREAM.PURGE.KV_cronrun_secrets", false),
        (Runner, "$JS.API.STREAM.INFO.KV_cronrun_secrets", true),
        (Runner, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", true),
        (Runner, "$JS.API.DIRECT.GET.KV_cronrun_secrets", false),
        (Runner, "$JS.API.STREAM.MSG.GET.KV_cronrun_secrets", false),
        (Runner, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", false),
        (Runner, "$KV.cronrun_secrets.tok", false),
        (Runner, "$JS.API.STREAM.CREATE.KV_cronrun_secrets", false),
        (Scheduler, "$JS.API.STREAM.INFO.KV_cronrun_secrets", true),
        (Scheduler, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", true),
        (Scheduler, "$JS.API.STREAM.MSG.GET.KV_cronrun_secrets", false),
        (Scheduler, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", false),
        (Scheduler, "$KV.cronrun_secrets.tok", false),
        (Scheduler, "$JS.API.STREAM.CREATE.KV_cronrun_secrets", false),
        (Viewer, "$JS.API.STREAM.INFO.KV_cronrun_secrets", false),
        (Viewer, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", false),
        (Viewer, "$JS.API.DIRECT.GET.KV_cronrun_secrets", false),
        (Viewer, "$JS.API.STREAM.MSG.GET.KV_cronrun_secrets", false),
        (Viewer, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets", false),
        (Viewer, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", false),
        (Viewer, "$KV.cronrun_secrets.tok", false),
    ]
};

#[test]
fn beyond_their_inbox_runners_subscribe_to_kills_and_admins_to_their_answers_only() {
    for role in Role::ALL {
        let p = perms(role);
        assert!(p.may_subscribe("_INBOX.UABC.x1"), "{role:?}");
        assert!(!p.may_subscribe("_INBOX.UOTHER.x1"), "{role:?} reads another's replies");
        assert!(!p.may_subscribe("cronrun.dispatch.default"), "{role:?}");
        assert_eq!(p.may_subscribe("cronrun.ctl.run.j.r.kill"), role == Role::Runner, "{role:?}");
        assert_eq!(p.may_subscribe("cronrun.ctl.answer.t1"), matches!(role, Role::Admin | Role::Runner), "{role:?}");
    }
}

#[test]
fn viewers_and_runners_read_with_consumers_of_their_own_but_cannot_touch_the_schedulers_durables() {
    let viewer = perms(Role::Viewer);
    let cases = [
        ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS", true),
        ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.oc1.cronrun.events.>", true),
        ("$JS.API.CONSUMER.DELETE.CRONRUN_EVENTS.oc1", true),
        ("$JS.API.CONSUMER.DELETE.CRONRUN_EVENTS.notify", false),
        ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify", false),
        ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify.cronrun.events.>", false),
        ("$JS.API.CONSUMER.UPDATE.CRONRUN_EVENTS.notify", false),
        ("$JS.API.CONSUMER.DELETE.KV_cronrun_runs.chains", false),
        ("$JS.API.CONSUMER.CREATE.KV_cronrun_runs.chains", false),
        ("$JS.API.CONSUMER.DURABLE.CREATE.CRONRUN_EVENTS.notify", false),
    ];
    for (subject, allowed) in cases {
        assert_eq!(viewer.may_publish(subject), allowed, "viewer publish {subject}");
    }
    let runner = perms(Role::Runner);
    assert!(!runner.may_publish("$JS.API.CONSUMER.DELETE.KV_cronrun_runs.chains"));
    assert!(runner.may_publish("$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.pool-default.cronrun.dispatch.default"));
    // An agent holding the scheduler's role keeps its right to make its durables.
    let agent = perms(Role::Scheduler).union(perms(Role::Runner));
    assert!(agent.may_publish("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify"));
    assert!(agent.publish_deny.is_empty());
}

/// Not one subject of a viewer's lists names the secrets bucket: no stream info, no
/// get, no consumer, no flow control. Nobody subscribes to its keys' subjects.
#[test]
fn a_viewer_has_no_route_to_the_secrets_bucket() {
    let viewer = perms(Role::Viewer);
    let lists = viewer.publish.iter().chain(&viewer.subscribe);
    assert!(lists.filter(|s| s.contains("secrets")).count() == 0, "{viewer:?}");
    for role in Role::ALL {
        assert!(!perms(role).may_subscribe("$KV.cronrun_secrets.tok"), "{role:?}");
    }
}

/// With the domain forms of `hub`, every role may publish a subject's domain form exactly
/// when it may publish the subject, may still publish every plain subject it could, and
/// gains nothing that no plain subject of its lists mirrors.
#[test]
fn domain_forms_mirror_each_right_and_refusal_and_add_none() {
    let hub = JsApi::domain("hub").unwrap();
    for role in Role::ALL {
        let plain = perms(role);
        let both = plain.clone().with_domain_forms(&hub);
        for subject in PUBLISH_CASES.iter().map(|c| c.1).chain(plain.publish.iter().map(String::as_str)) {
            let allowed = plain.may_publish(subject);
            assert_eq!(both.may_publish(subject), allowed, "{role:?} {subject}");
            assert_eq!(both.may_publish(&hub.subject(subject)), allowed, "{role:?} {}", hub.subject(subject));
        }
        for s in both.publish.iter().filter(|s| !plain.publish.contains(s)) {
            assert!(plain.publish.iter().any(|p| hub.domain_form(p).as_ref() == Some(s)), "{role:?}: {s}");
        }
        for s in &plain.publish_deny {
            assert!(both.publish_deny.contains(&hub.subject(s)), "{role:?}: refusal {s}");
        }
        assert_eq!(both.subscribe, plain.subscribe, "{role:?}");
        // No other domain, no object store through the domain, no `$OBJ`.
        for other in ["$JS.edge.API.STREAM.INFO.KV_cronrun_jobs", "$JS.hub.API.$O.cronrun_plugins.C.x"] {
            assert!(!both.may_publish(other), "{role:?} {other}");
        }
        // Without a domain, nothing changes.
        assert_eq!(plain.clone().with_domain_forms(&JsApi::local()), plain);
    }
    // A wildcard over the whole API is not mirrored (its form would reach every key);
    // a refusal is, even where it refuses more.
    let wide = Permissions {
        publish: vec!["$JS.API.>".into(), "$JS.API.*.INFO.x".into(), "$KV.b.>".into()],
        subscribe: vec![],
        publish_deny: vec!["$JS.API.*.DELETE.>".into(), "$KV.b.secret".into()],
    }
    .with_domain_forms(&hub);
    assert!(!wide.may_publish("$JS.hub.API.$KV.other.k"));
    assert!(!wide.may_publish("$JS.hub.API.STREAM.INFO.x"));
    assert!(wide.may_publish("$JS.hub.API.$KV.b.k"));
    assert!(!wide.may_publish("$JS.hub.API.$KV.b.secret"));
    assert!(!wide.may_publish("$KV.b.secret"));
    assert!(wide.publish_deny.contains(&"$JS.hub.API.*.DELETE.>".to_string()));
}

#[test]
fn union_keeps_both() {
    let both = perms(Role::Scheduler).union(perms(Role::Runner));
    assert!(both.may_publish("$KV.cronrun_leases.shard.1"));
    assert!(both.may_publish("$KV.cronrun_leases.run.j.r"));
    assert!(both.may_subscribe("cronrun.ctl.run.j.r.kill"));
    assert!(!both.may_publish("$KV.cronrun_jobs.x"));
}
