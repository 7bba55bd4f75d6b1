//! The store's schema stamps and migrations, and its accounting records.

use super::*;
use redb::ReadableTableMetadata;

#[test]
fn a_new_store_is_stamped_and_one_of_another_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let stamp = |store: &Store| {
        store
            .with_db(|db| {
                let txn = db.begin_read().unwrap();
                Ok(txn.open_table(META).unwrap().get("schema").unwrap().map(|v| v.value()))
            })
            .unwrap()
    };
    assert_eq!(stamp(&store), Some(SCHEMA));
    // As a later arm-server would leave it.
    let txn = store.db.read().unwrap().as_ref().unwrap().begin_write().unwrap();
    txn.open_table(META).unwrap().insert("schema", SCHEMA + 1).unwrap();
    txn.commit().unwrap();
    drop(store);
    let refused = Store::open(dir.path()).unwrap_err().to_string();
    assert!(
        refused.contains(&format!("schema {}", SCHEMA + 1)) && refused.contains("new state directory"),
        "{refused}"
    );
    // Nothing was changed by the refusal.
    let db = Database::create(dir.path().join("arm.redb")).unwrap();
    let txn = db.begin_read().unwrap();
    assert_eq!(txn.open_table(META).unwrap().get("schema").unwrap().map(|v| v.value()), Some(SCHEMA + 1));
}

fn record(accelerator: &str, start_ms: u64, end_ms: u64) -> Usage {
    Usage {
        job: "j".into(),
        user: "u".into(),
        group: "g".into(),
        kind: crate::model::UsageKind::Static,
        accelerator: accelerator.into(),
        capability: 1,
        start_ms,
        end_ms: Some(end_ms),
    }
}

#[test]
fn a_schema_1_store_is_migrated_and_records_are_read_and_purged_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let txn = store.db.read().unwrap().as_ref().unwrap().begin_write().unwrap();
    txn.open_table(META).unwrap().insert("schema", 1).unwrap();
    txn.commit().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let txn = store.db.read().unwrap().as_ref().unwrap().begin_read().unwrap();
    assert_eq!(txn.open_table(META).unwrap().get("schema").unwrap().map(|v| v.value()), Some(SCHEMA));
    drop(txn);

    let records = [record("h/0", 0, 1_000), record("h/1", 500, 2_000), record("h/0", 1_000, 3_000)];
    let changes: Vec<Change> =
        records.iter().map(|r| (Key::UsageRecord(r.clone()), Some(encode(r).unwrap()))).collect();
    store.commit(&changes).unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.usage_since(0).unwrap(), records, "all, in order of their end, after a reopen");
    assert_eq!(store.usage_since(1_000).unwrap(), records[1..], "only those ending after `since`");
    assert_eq!(store.purge_usage(2_000).unwrap(), 1, "ended before 2 s");
    assert_eq!(store.usage_since(0).unwrap(), records[1..]);
}

/// The accounting records the store's file holds, read without writing deferred applies first.
fn records_on_file(store: &Store) -> usize {
    store
        .with_open_db(|db| {
            let txn = db.begin_read().map_err(store_err)?;
            Ok(txn.open_table(USAGE).map_err(store_err)?.len().map_err(store_err)? as usize)
        })
        .unwrap()
}

fn usage_change(usage: &Usage) -> Change {
    (Key::UsageRecord(usage.clone()), Some(encode(usage).unwrap()))
}

#[test]
fn a_replicas_applies_are_written_in_groups_and_read_back_before_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let applied: Vec<Usage> = (0..deferred::APPLIES_PER_WRITE).map(|i| record("h/0", i * 10, i * 10 + 5)).collect();
    for usage in &applied[..3] {
        store.apply(vec![usage_change(usage)]).unwrap();
    }
    assert_eq!(records_on_file(&store), 0, "three applies are deferred");
    // A read writes them first: a replica taking the lead reads back what it applied.
    assert_eq!(store.usage_since(0).unwrap(), applied[..3].to_vec());
    assert_eq!(records_on_file(&store), 3);

    for usage in &applied[3..] {
        store.apply(vec![usage_change(usage)]).unwrap();
    }
    assert_eq!(records_on_file(&store), 3, "fewer than a group's applies since the read");
    // A write too: the deferred applies go first (written after it, they would outlive the purge).
    let purged = store.purge_usage(u64::MAX).unwrap();
    assert_eq!(purged, applied.len(), "the purge saw every apply");

    // A full group is written without a read.
    for usage in &applied {
        store.apply(vec![usage_change(usage)]).unwrap();
    }
    assert_eq!(records_on_file(&store), applied.len());
}

#[test]
fn deferred_applies_keep_the_last_value_of_each_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let record = |port: u16| MemberRecord { api: ([10, 0, 0, 1], port).into(), key: "ab".repeat(32) };
    store.apply(vec![record(7000).change(1).unwrap(), record(7000).change(2).unwrap()]).unwrap();
    store.apply(vec![record(7001).change(1).unwrap()]).unwrap();
    store.apply(vec![MemberRecord::deletion(2)]).unwrap();
    let members = store.members().unwrap();
    assert_eq!(members.into_iter().collect::<Vec<_>>(), vec![(1, record(7001))], "the later value of each key");
}
