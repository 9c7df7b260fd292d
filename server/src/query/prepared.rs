//! Prepared statements of the query service: a handle per statement, with the parameter
//! values last bound to it. At most [`MAX_PREPARED`] are kept; beyond that the oldest goes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

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
    /// Keeps `sql` and returns its handle.
    pub fn add(&self, sql: String) -> Bytes {
        let Ok(mut store) = self.store.lock() else {
            return Bytes::new();
        };
        store.next += 1;
        let handle = Bytes::from(format!("prepared-{}", store.next));
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
            },
        );
        handle
    }

    /// The statement of `handle`.
    pub fn get(&self, handle: &[u8]) -> Option<Statement> {
        self.store.lock().ok()?.statements.get(handle).cloned()
    }

    /// Binds `parameters` to the statement of `handle`; false when there is none.
    pub fn bind(&self, handle: &[u8], parameters: RecordBatch) -> bool {
        let Ok(mut store) = self.store.lock() else {
            return false;
        };
        match store.statements.get_mut(handle) {
            Some(statement) => {
                statement.parameters = Some(parameters);
                true
            }
            None => false,
        }
    }

    /// Forgets the statement of `handle`.
    pub fn close(&self, handle: &[u8]) {
        if let Ok(mut store) = self.store.lock() {
            store.statements.remove(handle);
            store.order.retain(|h| h.as_ref() != handle);
        }
    }
}
