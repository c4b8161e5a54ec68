//! Property tests of the response decoder: no input crashes it or makes it
//! claim more bytes than it was given; encoded responses round-trip, also
//! when split at any point.

use proptest::prelude::*;
use ticketing::wire::{self, Code, Response, Status};

const STATUSES: &[u8] = b"GTBONMUEPJ";

fn response() -> impl Strategy<Value = (u8, u8, u16, u32, u64, Vec<u8>)> {
    (
        prop::sample::select(STATUSES),
        any::<u8>(),
        any::<u16>(),
        any::<u32>(),
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..300),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics(b in prop::collection::vec(any::<u8>(), 0..600)) {
        match wire::parse_response(&b) {
            Ok(Some((r, n))) => {
                prop_assert!(n >= wire::HEADER_LEN && n <= b.len());
                if let Some(max) = r.status.max_payload() {
                    prop_assert!(r.payload.len() <= max);
                    prop_assert_eq!(n, wire::HEADER_LEN + r.payload.len());
                }
            }
            Ok(None) => prop_assert!(b.len() < wire::response_frame_len(&b) || b.len() < wire::HEADER_LEN),
            Err(_) => {}
        }
        let _ = wire::parse_hello(&b);
        let _ = wire::parse_welcome(&b);
        let _ = wire::parse_auth(&b);
        let _ = wire::valid_key(&b);
        let _ = wire::is_tls_required(&b);
        // The set-body decoder (protocol 1.1): never panics, never yields
        // more bytes than it was given.
        let total: usize = wire::set_keys(&b).map(|k| k.len() + 1).sum();
        prop_assert!(total <= b.len());
    }

    #[test]
    fn set_bodies_round_trip(keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..=250), 2..=16)) {
        let body = wire::set_body(&keys);
        let got: Vec<Vec<u8>> = wire::set_keys(&body).map(<[u8]>::to_vec).collect();
        prop_assert_eq!(&got, &keys);
        let mut b = Vec::new();
        wire::append_acquire_set(&mut b, 7, &body, 1000, 0);
        prop_assert_eq!(b[1] as usize, keys.len());
        prop_assert_eq!(u16::from_be_bytes([b[2], b[3]]) as usize, body.len());
        prop_assert_eq!(b.len(), wire::HEADER_LEN + body.len());
    }

    #[test]
    fn round_trip_split((st, code, queued, req_id, value, payload) in response(), cut in any::<prop::sample::Index>()) {
        let status = Status::from_byte(st).unwrap();
        let max = status.max_payload();
        let payload: &[u8] = match max { Some(m) => &payload[..payload.len().min(m)], None => &[] };
        let r = Response { status, code: Code(code), queued, req_id, value: if max.is_some() { payload.len() as u64 } else { value }, payload };
        let mut b = Vec::new();
        wire::append_response(&mut b, &r);
        b.extend_from_slice(b"trailing");
        let (got, n) = wire::parse_response(&b).unwrap().unwrap();
        prop_assert_eq!(got, r);
        prop_assert_eq!(n, b.len() - 8);
        let i = cut.index(n);
        prop_assert_eq!(wire::parse_response(&b[..i]).unwrap(), None);
    }

    #[test]
    fn oversized_payload_is_an_error(st in prop::sample::select(&b"MEJ"[..]), extra in 1u64..1_000_000) {
        let status = Status::from_byte(st).unwrap();
        let mut b = vec![st, 0, 0, 0, 0, 0, 0, 1];
        b.extend_from_slice(&(status.max_payload().unwrap() as u64 + extra).to_be_bytes());
        prop_assert_eq!(wire::parse_response(&b), Err(wire::WireError::PayloadTooLarge));
    }
}
