//! Merging metric series: `INSERT INTO sink SELECT * FROM metrics [WHERE p] GROUP BY name,
//! resource.attributes['k'], attributes['k']` keeps only the listed attributes of each
//! series' identity, and `ALTER TABLE metrics DROP [RESOURCE | SCOPE] ATTRIBUTE 'k'` drops
//! one; the series that then share an identity are merged, never sent side by side. Each
//! merged series gets one point per interval, its values merged as its type says (see
//! [`merger`] for the rules, [`values`] for the arithmetic). Workers split the merged series
//! between them by identity, so that each is merged by one worker whichever connections its
//! parts came on.

pub(crate) mod identity;
pub(crate) mod merger;
pub(crate) mod op;
pub(crate) mod points;
pub(crate) mod values;
