use super::*;
use base64::Engine;

/// RFC 9421 appendix B.1.4's `test-key-ed25519`, the key of the Web Bot Auth drafts' test
/// vector (draft-meunier-web-bot-auth-architecture, appendix A): public `x`, private `d`.
const TEST_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";
const TEST_D: &str = "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU";

fn b64url(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .unwrap()
}

fn key32(s: &str) -> [u8; 32] {
    b64url(s).try_into().unwrap()
}

const WINDOW: Window = Window {
    max_skew_s: 60,
    max_validity_s: 3600,
};

fn request(headers: &[(&str, &str)]) -> Request {
    Request {
        method: "GET".into(),
        authority: "example.com".into(),
        scheme: "https".into(),
        path: "/path?q=1".into(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
    }
}

/// Signs `req` for `input_member` (label `sig1`) with the test key, the way an agent does:
/// the base from this module, the signature from ed25519-dalek's signer.
fn signed(mut req: Request, input_member: &str) -> Request {
    req.headers
        .push(("signature-input".into(), format!("sig1={input_member}")));
    let list = match Parser::new(input_member).parse_list().unwrap().remove(0) {
        ListEntry::InnerList(l) => l,
        ListEntry::Item(_) => unreachable!(),
    };
    let base = signature_base(&req, &list).unwrap();
    let sk = ed25519_dalek::SigningKey::from_bytes(&key32(TEST_D));
    use ed25519_dalek::Signer;
    let sig = sk.sign(base.as_bytes()).to_bytes();
    let b64 = base64::engine::general_purpose::STANDARD.encode(sig);
    req.headers
        .push(("signature".into(), format!("sig1=:{b64}:")));
    req
}

const NOW: u64 = 1_735_689_600;

#[test]
fn the_drafts_test_vector_verifies_and_another_authority_does_not() {
    // draft-meunier-web-bot-auth-architecture appendix A: @authority example.com.
    let input = r#"("@authority");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="gubxywVx7hzbYKatLgzuKDllDAIXAkz41PydU7aOY7vT+Mb3GJNxW0qD4zJ+IOQ1NVtg+BNbTCRUMt1Ojr5BgA==";tag="web-bot-auth""#;
    let sig =
        "uz2SAv+VIemw+Oo890bhYh6Xf5qZdLUgv6/PbiQfCFXcX/vt1A8Pf7OcgL2yUDUYXFtffNpkEr5W6dldqFrkDg==";
    let mut req = request(&[
        ("signature-input", &format!("sig1={input}")),
        ("signature", &format!("sig1=:{sig}:")),
        ("signature-agent", "\"https://agent.example\""),
    ]);
    // The vector covers no signature-agent: with the header present, that is refused.
    assert_eq!(
        prepare(&req, NOW, WINDOW).unwrap_err().outcome,
        Outcome::MissingComponent
    );
    req.headers.pop();
    // Without Signature-Agent no agent is named, so the base is checked directly.
    assert_eq!(
        prepare(&req, NOW, WINDOW).unwrap_err().outcome,
        Outcome::UnknownAgent
    );
    let list = match Parser::new(input).parse_list().unwrap().remove(0) {
        ListEntry::InnerList(l) => l,
        ListEntry::Item(_) => unreachable!(),
    };
    let p = |req: &Request| Prepared {
        agent: String::new(),
        keyid: String::new(),
        nonce: None,
        expires: 0,
        base: signature_base(req, &list).unwrap(),
        signature: base64::engine::general_purpose::STANDARD
            .decode(sig)
            .unwrap()
            .try_into()
            .unwrap(),
    };
    assert_eq!(
        p(&req).base,
        format!("\"@authority\": example.com\n\"@signature-params\": {input}")
    );
    assert_eq!(p(&req).verify(&key32(TEST_X)), Outcome::Verified);
    req.authority = "example.org".into();
    assert_eq!(p(&req).verify(&key32(TEST_X)), Outcome::BadSignature);
    // The default port is not part of @authority.
    req.authority = "EXAMPLE.com:443".into();
    assert_eq!(p(&req).verify(&key32(TEST_X)), Outcome::Verified);
}

fn member(created: u64, expires: u64, extra: &str) -> String {
    format!(
        r#"("@authority" "signature-agent");created={created};expires={expires};keyid="k1";nonce="n1";tag="web-bot-auth"{extra}"#
    )
}

#[test]
fn a_good_signature_reads_its_agent_keyid_nonce_and_expiry_and_verifies() {
    let req = signed(
        request(&[("signature-agent", "\"https://agent.example/\"")]),
        &member(NOW, NOW + 60, ""),
    );
    let p = prepare(&req, NOW, WINDOW).unwrap();
    assert_eq!(
        (
            p.agent.as_str(),
            p.keyid.as_str(),
            p.nonce.as_deref(),
            p.expires
        ),
        ("https://agent.example", "k1", Some("n1"), NOW + 60)
    );
    assert_eq!(p.verify(&key32(TEST_X)), Outcome::Verified);
    // A tampered covered component (the agent) fails; so does another key.
    let mut t = req.clone();
    t.headers[0].1 = "\"https://agent.example\"".into();
    assert_eq!(
        prepare(&t, NOW, WINDOW).unwrap().verify(&key32(TEST_X)),
        Outcome::BadSignature
    );
    assert_eq!(p.verify(&[9; 32]), Outcome::BadSignature);
}

#[test]
fn the_dictionary_form_of_signature_agent_is_read_by_its_key() {
    let input = r#"("@authority" "signature-agent";key="agent1");created=1735689600;expires=1735689660;keyid="k1";tag="web-bot-auth""#;
    let req = signed(
        request(&[(
            "signature-agent",
            r#"other="https://x.example", agent1="https://agent.example""#,
        )]),
        input,
    );
    let p = prepare(&req, NOW, WINDOW).unwrap();
    assert_eq!(p.agent, "https://agent.example");
    assert!(p
        .base
        .starts_with("\"@authority\": example.com\n\"signature-agent\";key=\"agent1\": \"https://agent.example\"\n"));
    assert_eq!(p.verify(&key32(TEST_X)), Outcome::Verified);
}

#[test]
fn every_refusal_has_its_reason() {
    let agent = ("signature-agent", "\"https://agent.example\"");
    let cases: Vec<(Request, Outcome)> = vec![
        (
            signed(request(&[agent]), &member(NOW - 120, NOW - 61, "")),
            Outcome::Expired,
        ),
        (
            signed(request(&[agent]), &member(NOW + 61, NOW + 120, "")),
            Outcome::CreatedInFuture,
        ),
        (
            signed(request(&[agent]), &member(NOW, NOW + 3601, "")),
            Outcome::ValidityTooLong,
        ),
        (
            signed(request(&[agent]), &member(NOW, NOW - 1, "")),
            Outcome::Malformed,
        ),
        (
            signed(
                request(&[agent]),
                &member(NOW, NOW + 60, ";alg=\"rsa-pss-sha512\""),
            ),
            Outcome::UnsupportedAlg,
        ),
        (
            signed(
                request(&[agent]),
                r#"("@authority" "signature-agent");created=1735689600;expires=1735689660;keyid="k1""#,
            ),
            Outcome::MissingTag,
        ),
        (
            signed(
                request(&[agent]),
                r#"("@authority" "signature-agent");created=1735689600;expires=1735689660;keyid="k1";tag="other""#,
            ),
            Outcome::MissingTag,
        ),
        (
            signed(
                request(&[agent]),
                r#"("@authority");created=1735689600;expires=1735689660;keyid="k1";tag="web-bot-auth""#,
            ),
            Outcome::MissingComponent,
        ),
        (
            signed(
                request(&[agent]),
                r#"("@method" "signature-agent");created=1735689600;expires=1735689660;keyid="k1";tag="web-bot-auth""#,
            ),
            Outcome::MissingComponent,
        ),
        (
            signed(
                request(&[agent]),
                r#"("@authority" "signature-agent");expires=1735689660;keyid="k1";tag="web-bot-auth""#,
            ),
            Outcome::Malformed,
        ),
        (
            signed(
                request(&[agent]),
                r#"("@authority" "signature-agent");created=1735689600;expires=1735689660;tag="web-bot-auth""#,
            ),
            Outcome::Malformed,
        ),
        (
            request(&[
                agent,
                ("signature-input", "sig1=(\"@authority\""),
                ("signature", "sig1=:AA==:"),
            ]),
            Outcome::Malformed,
        ),
        (request(&[agent]), Outcome::MissingTag),
    ];
    for (i, (req, want)) in cases.iter().enumerate() {
        let got = prepare(req, NOW, WINDOW).map(|_| Outcome::Verified);
        assert_eq!(got.map_err(|r| r.outcome), Err(*want), "case {i}: {req:?}");
    }
    // Within the skew both ends still pass.
    let ok = signed(request(&[agent]), &member(NOW + 60, NOW + 120, ""));
    assert!(prepare(&ok, NOW, WINDOW).is_ok());
    let ok = signed(request(&[agent]), &member(NOW - 200, NOW - 59, ""));
    assert!(prepare(&ok, NOW, WINDOW).is_ok());
    // A signature whose bytes are not 64 long is malformed.
    let mut short = signed(request(&[agent]), &member(NOW, NOW + 60, ""));
    short.headers.last_mut().unwrap().1 = "sig1=:AAAA:".into();
    assert_eq!(
        prepare(&short, NOW, WINDOW).unwrap_err().outcome,
        Outcome::Malformed
    );
}

#[test]
fn derived_components_follow_rfc_9421() {
    let req = request(&[]);
    let item = |n: &str| {
        sfv::Item::new(BareItem::String(
            sfv::String::from_string(n.into()).unwrap(),
        ))
    };
    let v = |n: &str| component_value(&req, &item(n));
    assert_eq!(v("@method").unwrap(), "GET");
    assert_eq!(v("@target-uri").unwrap(), "https://example.com/path?q=1");
    assert_eq!(v("@path").unwrap(), "/path");
    assert_eq!(v("@query").unwrap(), "?q=1");
    assert_eq!(v("@request-target").unwrap(), "/path?q=1");
    assert_eq!(v("@scheme").unwrap(), "https");
    assert_eq!(v("@status"), Err(Outcome::MissingComponent));
    assert_eq!(v("x-absent"), Err(Outcome::MissingComponent));
}
