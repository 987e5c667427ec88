//! A [`Thread`] as a store keeps it in bytes: packed (MessagePack, each field under its
//! name, so a build that adds a field still reads the records of the build before), or
//! JSON, as the Redis store wrote records before it packed them.
//!
//! ```
//! # let thread: hitl_thread::Thread = serde_json::from_str(
//! #     r#"{"format":1,"id":"t","version":2,"tool":"x","args_digest":"d","expires_at_ms":9}"#).unwrap();
//! let packed = hitl_thread::pack(&thread).unwrap();
//! assert_eq!(hitl_thread::unpack("t", &packed).unwrap().tool, thread.tool);
//! assert!(packed[1..].starts_with(&hitl_thread::packed_start(1)), "the format, first");
//! ```

use crate::{StoreError, Thread};

/// `thread`, packed.
pub fn pack(thread: &Thread) -> Result<Vec<u8>, StoreError> {
    let mut packed = Vec::with_capacity(1024);
    rmp_serde::encode::write_named(&mut packed, thread)
        .map_err(|e| StoreError::Corrupt { id: thread.id.to_string(), reason: e.to_string() })?;
    Ok(packed)
}

/// The thread in `record`, packed or JSON (a JSON record starts with `{`, which no
/// packed one does: a packed record is a map). A record of a format newer than this
/// build reads is reported as such, whether or not it parses.
pub fn unpack(id: &str, record: &[u8]) -> Result<Thread, StoreError> {
    let read = if is_json(record) {
        serde_json::from_slice::<Thread>(record).map_err(|e| e.to_string())
    } else {
        rmp_serde::from_slice::<Thread>(record).map_err(|e| e.to_string())
    };
    match read {
        Ok(thread) if thread.format > crate::THREAD_FORMAT => {
            Err(StoreError::NewerFormat { id: id.to_owned(), format: thread.format })
        }
        Ok(thread) => Ok(thread),
        Err(reason) => {
            Err(StoreError::newer_format(id, record)
                .unwrap_or_else(|| StoreError::Corrupt { id: id.to_owned(), reason }))
        }
    }
}

/// How a packed record of `format` starts after the one byte of its map's header (a
/// record has fewer than 16 fields): its first field, the format. A Redis script reads
/// it to tell a record it may claim without unpacking it.
pub fn packed_start(format: u32) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Start {
        format: u32,
    }
    let mut start = Vec::with_capacity(16);
    // Writing a number into a vector cannot fail.
    let _ = rmp_serde::encode::write_named(&mut start, &Start { format });
    start.split_off(1)
}

pub(crate) fn is_json(record: &[u8]) -> bool {
    record.first() == Some(&b'{')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread() -> Thread {
        serde_json::from_str(
            r#"{"format":4,"id":"t","version":2,"tool":"x","args_digest":"d","owner":"o","task":{"created_at_ms":1,"updated_at_ms":1},"expires_at_ms":9}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_packed_record_reads_back_as_its_json_did() {
        let thread = thread();
        let packed = pack(&thread).unwrap();
        let json = serde_json::to_vec(&thread).unwrap();
        assert!(packed.len() < json.len(), "{} packed, {} JSON", packed.len(), json.len());
        for record in [&packed, &json] {
            let read = unpack("t", record).unwrap();
            assert_eq!(serde_json::to_value(&read).unwrap(), serde_json::to_value(&thread).unwrap());
        }
        assert_eq!(packed[0] & 0xf0, 0x80, "a map of fewer than 16 fields: one byte of header");
        assert!(packed[1..].starts_with(&packed_start(4)));
        assert!(!packed[1..].starts_with(&packed_start(1)));
    }

    #[test]
    fn a_newer_record_is_reported_as_newer_packed_or_not() {
        let newer = serde_json::json!({"format": 99, "id": "t", "rounds": [1]});
        for record in [rmp_serde::to_vec_named(&newer).unwrap(), serde_json::to_vec(&newer).unwrap()] {
            assert!(matches!(unpack("t", &record), Err(StoreError::NewerFormat { format: 99, .. })), "{record:?}");
        }
        assert!(matches!(unpack("t", b"\x81\xa1x"), Err(StoreError::Corrupt { .. })));
        assert!(matches!(unpack("t", b"{"), Err(StoreError::Corrupt { .. })));
    }
}
