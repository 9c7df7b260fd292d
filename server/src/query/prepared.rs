//! Prepared statements of the query service: a handle per statement, with the parameter
//! values last bound to it and the principal that prepared it (only it may bind, run or close
//! the statement). At most [`MAX_PREPARED`] are kept; beyond that the oldest goes.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use bytes::Bytes;

/// Prepared statements kept at once.
pub const MAX_PREPARED: usize = 1024;

/// One prepared statement.
#[derive(Debug, Clone)]
pub struct Statement {
    /// Its query.
    pub sql: String,
    /// The values bound to its parameters, if any.
    pub parameters: Option<RecordBatch>,
    /// The principal that prepared it.
    owner: Arc<str>,
}

#[derive(Default)]
struct Store {
    next: u64,
    statements: HashMap<Bytes, Statement>,
    order: VecDeque<Bytes>,
}

/// The prepared statements of one service.
#[derive(Default)]
pub struct Prepared {
    store: Mutex<Store>,
}

impl Prepared {
    /// Keeps `sql`, prepared by `owner`, and returns its handle (not one another principal
    /// could guess).
    pub fn add(&self, sql: String, owner: &Arc<str>) -> Bytes {
        let Ok(mut store) = self.store.lock() else {
            return Bytes::new();
        };
        store.next += 1;
        let mut random = std::collections::hash_map::RandomState::new().build_hasher();
        random.write_u64(store.next);
        let handle = Bytes::from(format!("prepared-{}-{:016x}", store.next, random.finish()));
        if store.order.len() >= MAX_PREPARED
            && let Some(oldest) = store.order.pop_front()
        {
            store.statements.remove(&oldest);
        }
        store.order.push_back(handle.clone());
        store.statements.insert(
            handle.clone(),
            Statement {
                sql,
                parameters: None,
                owner: Arc::clone(owner),
            },
        );
        handle
    }

    /// The statement of `handle`, when `who` prepared it.
    pub fn get(&self, handle: &[u8], who: &str) -> Option<Statement> {
        let store = self.store.lock().ok()?;
        let statement = store.statements.get(handle)?;
        (*statement.owner == *who).then(|| statement.clone())
    }

    /// Binds `parameters` to the statement of `handle`, when `who` prepared it; false when
    /// there is none.
    pub fn bind(&self, handle: &[u8], who: &str, parameters: RecordBatch) -> bool {
        let Ok(mut store) = self.store.lock() else {
            return false;
        };
        match store.statements.get_mut(handle) {
            Some(statement) if *statement.owner == *who => {
                statement.parameters = Some(parameters);
                true
            }
            _ => false,
        }
    }

    /// Forgets the statement of `handle`, when `who` prepared it.
    pub fn close(&self, handle: &[u8], who: &str) {
        if let Ok(mut store) = self.store.lock()
            && store
                .statements
                .get(handle)
                .is_some_and(|s| *s.owner == *who)
        {
            store.statements.remove(handle);
            store.order.retain(|h| h.as_ref() != handle);
        }
    }
}
