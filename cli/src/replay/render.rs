//! `replay` without `--json`: the document as aligned text.

use super::{Prediction, ReplayJson};
use crate::table::{pct, share, TextTable};

/// The replay as aligned text.
pub fn render(j: &ReplayJson, config_name: &str, summary: &str) -> String {
    let mut out = format!(
        "crawlguard replay: {config_name} ({summary})\n  {} requests, {} .. {}, speed {}x \
         ({:.1} s of replayed time)\n  verification: {}\n",
        j.requests,
        j.first.as_deref().unwrap_or("-"),
        j.last.as_deref().unwrap_or("-"),
        j.speed,
        j.replayed_seconds,
        j.verification
    );
    // Columns for shadow limits only when the configuration has some.
    let shadow_limits: Vec<&str> = j
        .limits
        .iter()
        .filter(|l| l.mode == "shadow")
        .map(|l| l.limit.as_str())
        .collect();
    let any_shadow = !shadow_limits.is_empty();
    if j.mode == "shadow" {
        out += "  mode shadow: limits in shadow mode reject nothing; \"shadow-limited\" below is \
                what the filter would count as shadow_limited (enforcing can reject more: \
                escalation applies to enforced limits only)\n";
    } else if any_shadow {
        out += &format!(
            "  limits in shadow mode ({}) reject nothing; \"shadow-limited\" below is what \
             they would have rejected\n",
            shadow_limits.join(", ")
        );
    }
    if !j.verdicts.is_empty() {
        out += "\nverifier callouts answered\n";
        let mut t = TextTable::new(["bot", "verdict", "callouts"]);
        for v in &j.verdicts {
            t.row(vec![
                v.bot.clone(),
                v.verdict.to_string(),
                v.callouts.to_string(),
            ]);
        }
        out += &t.render();
    }
    let shadow_head: &[&str] = if any_shadow {
        &["shadow-limited", "shadow-limited %"]
    } else {
        &[]
    };
    out += "\nper class\n";
    let mut t = TextTable::new(
        ["class", "requests", "admitted", "rejected", "rejected %"]
            .iter()
            .chain(shadow_head),
    );
    for c in &j.classes {
        let mut row = vec![
            c.class.to_string(),
            (c.admitted + c.rejected + c.shadow_limited).to_string(),
            c.admitted.to_string(),
            c.rejected.to_string(),
            pct(c.rejected_share),
        ];
        if any_shadow {
            row.push(c.shadow_limited.to_string());
            row.push(pct(c.shadow_limited_share));
        }
        t.row(row);
    }
    if j.exempt > 0 {
        let mut row = vec![
            "(exempt paths)".into(),
            j.exempt.to_string(),
            (j.exempt - j.exempt_rejected).to_string(),
            j.exempt_rejected.to_string(),
            pct(j.exempt_rejected as f64 / j.exempt as f64),
        ];
        if any_shadow {
            row.push("0".into());
            row.push(pct(0.0));
        }
        t.row(row);
    }
    out += &t.render();
    out += "\nper route\n";
    let mut t = TextTable::new(
        ["route", "admitted", "rejected", "rejected %"]
            .iter()
            .chain(shadow_head),
    );
    for r in &j.routes {
        let total = r.admitted + r.rejected + r.shadow_limited;
        let mut row = vec![
            r.route.clone(),
            r.admitted.to_string(),
            r.rejected.to_string(),
            pct(share(r.rejected, total)),
        ];
        if any_shadow {
            row.push(r.shadow_limited.to_string());
            row.push(pct(share(r.shadow_limited, total)));
        }
        t.row(row);
    }
    out += &t.render();
    out +=
        "\nper limit (admitted = forwarded requests the limit applied to and did not object to)\n";
    let mut head = vec![
        "limit",
        "class",
        "route",
        "key",
        "rate/s",
        "burst",
        "in flight",
        "admitted",
        "rejected",
    ];
    if any_shadow {
        head.extend(["mode", "shadow-limited"]);
    }
    let mut t = TextTable::new(head);
    for l in &j.limits {
        let mut row = vec![
            l.limit.clone(),
            l.class.to_string(),
            l.route.clone(),
            l.key.clone(),
            l.rate_per_s.map_or("-".to_string(), |r| format!("{r}")),
            l.burst.map_or("-".to_string(), |b| b.to_string()),
            l.max_in_flight.map_or("-".to_string(), |m| m.to_string()),
            l.admitted.to_string(),
            l.rejected.to_string(),
        ];
        if any_shadow {
            row.push(l.mode.to_string());
            row.push(l.shadow_limited.to_string());
        }
        t.row(row);
    }
    out += &t.render();
    out += "\nactual status (log) x predicted decision (this configuration)\n";
    let predicted = Prediction::ALL
        .into_iter()
        .filter(|p| any_shadow || *p != Prediction::ShadowLimited)
        .map(Prediction::label);
    let mut t = TextTable::new(["actual"].into_iter().chain(predicted));
    for m in &j.status_vs_prediction {
        if m.admitted + m.rejected_429 + m.rejected_503 + m.shadow_limited + m.exempt == 0 {
            continue;
        }
        let mut row = vec![
            m.actual.to_string(),
            m.admitted.to_string(),
            m.rejected_429.to_string(),
            m.rejected_503.to_string(),
        ];
        if any_shadow {
            row.push(m.shadow_limited.to_string());
        }
        row.push(m.exempt.to_string());
        t.row(row);
    }
    out += &t.render();
    if j.normalised_upstream > 0 {
        out += &format!(
            "  upstream 429/503 the response path would normalise: {}\n",
            j.normalised_upstream
        );
    }
    out += &format!(
        "\nclients that would be limited most{}\n",
        if j.top_limited_error_bound == 0 {
            String::new()
        } else {
            format!(
                " (counts may be low by up to {})",
                j.top_limited_error_bound
            )
        }
    );
    if j.top_limited_clients.is_empty() {
        out += "  none\n";
    } else {
        let n = if any_shadow {
            "rejected or shadow-limited"
        } else {
            "rejected"
        };
        let mut t = TextTable::new(["client", n, "class"]);
        for c in &j.top_limited_clients {
            t.row(vec![
                c.client.clone(),
                c.rejected.to_string(),
                c.class.to_string(),
            ]);
        }
        out += &t.render();
    }
    let mut notes = Vec::new();
    if j.no_client_address > 0 {
        notes.push(format!(
            "{} requests had no client address in the log: they share one client_ip key",
            j.no_client_address
        ));
    }
    if !j.header_keyed_limits.is_empty() {
        notes.push(format!(
            "limits keyed by a request header ({}) see it missing: access logs carry no \
             request headers, so those requests share the \"missing\" key",
            j.header_keyed_limits.join(", ")
        ));
    }
    if !j.cost_limits.is_empty() {
        notes.push(format!(
            "cost-based limits ({}) charge every forwarded request its reserve: the actual \
             cost is a response header, which access logs do not carry, so each request is \
             settled at its reservation (as the filter settles a missing header)",
            j.cost_limits.join(", ")
        ));
    }
    if j.shedding_not_replayed {
        notes.push(
            "shedding is enabled but not replayed: it follows the origin's response times \
             under the load this configuration would let through, which a log of other \
             traffic cannot give; no request was shed"
                .to_string(),
        );
    }
    if j.fleet_as_one_envoy {
        notes.push(
            "fleet mode is on: every request is decided against the whole fleet-wide limit, \
             as by one Envoy (right for the fleet's combined traffic, e.g. a load balancer's \
             log; one replica's log would get only its share); the overshoot of sync delays \
             is not replayed"
                .to_string(),
        );
    }
    if j.no_browser_signals > 0 {
        notes.push(format!(
            "{} requests were logged without tls, proto, ja4, asn, sfs and chua: the browser \
             checks that read them passed (log them as envoy/envoy-tls.yaml does to replay \
             the checks)",
            j.no_browser_signals
        ));
    }
    if j.browser_signals_not_configured > 0 {
        notes.push(format!(
            "{} requests were logged with a ja4 or an asn that this configuration does not read \
             (client_signals.ja4_header / asn_header unset): the tls_fingerprint and network \
             checks were not run on them, as in an Envoy running this configuration (replay \
             with the configuration your TLS edge runs to decide them)",
            j.browser_signals_not_configured
        ));
    }
    if !j.in_flight_limits.is_empty() {
        notes.push(if j.forwarded_without_duration > 0 {
            format!(
                "limits bounding requests in flight ({}) need each request's duration: {} \
                 forwarded requests had none in the log (Envoy's %DURATION%, nginx's \
                 $request_time) and were replayed as ending at once, so those limits saw them \
                 in flight for no time",
                j.in_flight_limits.join(", "),
                j.forwarded_without_duration
            )
        } else {
            format!(
                "limits bounding requests in flight ({}) saw each forwarded request in flight \
                 from its start for its logged duration; lines are replayed in their order, \
                 and Envoy writes a line when its request ends: sort a log by start time for \
                 exact counts of long requests",
                j.in_flight_limits.join(", ")
            )
        });
    }
    if j.unresolved > 0 {
        notes.push(format!(
            "{} requests were left waiting for a verdict",
            j.unresolved
        ));
    }
    if !notes.is_empty() {
        out += "\nnotes\n";
        for n in notes {
            out += &format!("  {n}\n");
        }
    }
    for w in &j.warnings {
        out += &format!("\nWARNING: {w}\n");
    }
    out
}
