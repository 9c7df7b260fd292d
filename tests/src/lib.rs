//! Shared helpers of the end-to-end tests (none yet beyond the test files themselves).
