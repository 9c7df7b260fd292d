//! The `GROUP BY` of a merge of metric series, `INSERT INTO sink SELECT * FROM metrics GROUP
//! BY name, resource.attributes['k'], attributes['k']`: which attributes stay part of a
//! series' identity.

use sqlparser::ast::{Expr, Spanned};

use crate::error::Located;
use crate::exprs::resolve;
use crate::model::{AttrScope, ColumnRef, Table};
use crate::program::Identity;

type Result<T> = std::result::Result<T, Located>;

/// The identity kept by `group_by`: each key is `name` (always kept), `scope.name`,
/// `scope.version` or one attribute; `what` names the statement in errors ("a merge of metric
/// series groups by").
pub(crate) fn kept(group_by: &[Expr], what: &str) -> Result<Identity> {
    let (mut resource, mut scope, mut point) = (Vec::new(), Vec::new(), Vec::new());
    let (mut scope_name, mut scope_version) = (false, false);
    for expr in group_by {
        let resolved = resolve(Table::Metrics, expr, &[])?;
        let bare = matches!(&resolved.expr, Expr::Identifier(_));
        match resolved.columns.as_slice() {
            [ColumnRef::Field(f)] if bare && f.name == "name" => {}
            [ColumnRef::Field(f)] if bare && f.name == "scope.name" => scope_name = true,
            [ColumnRef::Field(f)] if bare && f.name == "scope.version" => scope_version = true,
            [ColumnRef::Attr { scope: s, key, .. }] if bare => {
                let keys = match s {
                    AttrScope::Resource => &mut resource,
                    AttrScope::Scope => &mut scope,
                    AttrScope::Record => &mut point,
                };
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
            _ => {
                return Err(Located::at(
                    expr.span(),
                    format!(
                        "{what} name, scope.name, scope.version and attribute keys (attributes['k'], resource.attributes['k'], scope.attributes['k']), not `{expr}`: the metric, its type, unit and temporality always count, and time is the interval (metric_interval)"
                    ),
                ));
            }
        }
    }
    Ok(Identity::Keep {
        resource,
        scope,
        point,
        scope_name,
        scope_version,
    })
}
