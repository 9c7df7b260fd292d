//! Import cycles among the source files of each workspace crate, and the layers of the
//! gateway (`server/src/gateway`): its foundation (`base/`) uses no other layer, sinks and
//! sources use only the foundation (and not each other), the workers only those, and the
//! files at the top of `gateway/` the rest.
//!
//! Every workspace member with a `src/` directory is read file by file. Its module tree is
//! rebuilt from the crate roots (`lib.rs`, `main.rs`, `bin/*.rs`) by following `mod`
//! declarations: `mod.rs` is its folder's module, `foo.rs` is module `foo`, `#[path]` is
//! honoured, and inline `mod x { }` blocks belong to the file they are written in.
//!
//! A file depends on another file of the same crate when its code names something in it:
//! a `use` item (`crate::`, `super::`, `self::`, a child module or a name imported earlier,
//! nested braces included), or a path in expressions, types, patterns, attributes or macro
//! arguments (`crate::a::f()`, `super::x::Y`, `format!("{}", crate::a::NAME)`). Each path
//! goes to the deepest module file it reaches: `crate::a::b::Item` is an edge to the file of
//! `crate::a::b`, or to the file of `crate::a` when `b` is an item there.
//!
//! What is not an edge:
//! - a `mod x;` declaration: a parent declaring its child imports nothing from it (a parent's
//!   `use child::Thing` and a child's `use super::Thing` are edges like any other import);
//! - code that is only built for tests: items under `#[cfg(test)]` (including whole
//!   `#[cfg(test)] mod tests;` files) and `#[test]` functions, since tests may use anything;
//! - a file's references to itself, and paths into other crates.
//!
//! Re-exports are taken as written: a name that a file re-exports with `pub use` is, for the
//! files that import it through that file (`use crate::Name` where `lib.rs` has
//! `pub use a::Name`), an edge to the re-exporting file, not to the file that defines the
//! name. This is simple and conservative: a facade that re-exports from files which import
//! through the facade shows up as a cycle.
//!
//! Macros defined with `macro_rules!` and used by their bare name are not followed; paths
//! inside macro arguments and `macro_rules!` bodies (`$crate::...`) are.
//!
//! The test fails naming, per crate, every strongly connected component of more than one
//! file (Tarjan's algorithm), its size, and the distinct shortest cycles through its files.
//! With `PENSTOCK_LAYERS_PRINT=1` it also prints every crate's edges (`from -> to: names`)
//! to standard output (not captured by the test harness):
//! `PENSTOCK_LAYERS_PRINT=1 cargo test -p penstock-tests --test layers`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::Path;

use syn::buffer::{Cursor, TokenBuffer};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, ImplItem, Item, ItemMod, Meta, Token, TraitItem, UseTree};

/// A module's path from its crate root (empty for the root itself).
type ModPath = Vec<String>;

/// One crate's source files: path relative to `src/` (with `/` separators) to text.
type Sources = BTreeMap<String, String>;

/// The names each file takes from each other file: `from -> to -> names`.
type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The names bound by `use` items, per module: `module -> name -> path as written`.
type Aliases = BTreeMap<ModPath, BTreeMap<String, Vec<String>>>;

/// How deep `use` items that import other imports are followed.
const ALIAS_DEPTH: usize = 8;

/// The file graph of one crate.
#[derive(Debug, Default)]
struct FileGraph {
    /// Files built outside tests, relative to `src/`.
    files: BTreeSet<String>,
    /// Import edges between those files, with the names imported.
    edges: Edges,
    /// Files that are only built for tests (declared under `#[cfg(test)]`).
    test_files: BTreeSet<String>,
    /// Files under `src/` that no `mod` declaration reaches.
    unreached: BTreeSet<String>,
}

/// One crate root's module tree.
#[derive(Debug, Default)]
struct ModuleTree {
    /// Every module (files and inline blocks) to the file that holds it.
    modules: BTreeMap<ModPath, String>,
    /// Every file of the tree to the module it is.
    files: BTreeMap<String, FileModule>,
}

/// Where a file sits in its module tree.
#[derive(Debug)]
struct FileModule {
    /// The module the file is.
    path: ModPath,
    /// Whether the file is only built for tests.
    test_only: bool,
}

/// A position inside a file where `mod` declarations are read.
struct Place<'a> {
    /// The file, relative to `src/`.
    file: &'a str,
    /// Whether the file's child modules live in its own folder (`lib.rs`, `main.rs`,
    /// `mod.rs`) rather than in a folder named after it.
    mod_rs: bool,
    /// The inline modules around the position.
    inline: Vec<String>,
}

/// How a path was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// A leaf of a `use` tree that names one thing.
    Use,
    /// A `use` tree glob (`use a::*`).
    Glob,
    /// A path in code: expressions, types, patterns, attributes, macro tokens.
    Code,
}

/// A path written in a file, not yet resolved.
#[derive(Debug)]
struct Reference {
    /// The module the path is written in (inline modules included).
    here: ModPath,
    /// The path's segments as written.
    segments: Vec<String>,
    /// How the path was written.
    written: Written,
}

/// What one leaf of a `use` tree binds.
enum Binding {
    /// A name (the imported one or its `as` rename; `_` binds nothing usable).
    Name(String),
    /// Everything public in a module.
    Glob,
}

/// Collects the paths written in one file's code that is built outside tests, and the names
/// its `use` items bind.
struct Collector<'a> {
    /// The module the visitor is in.
    here: ModPath,
    /// The paths found so far.
    references: Vec<Reference>,
    /// The names bound by `use` items, shared by all files of a module tree.
    aliases: &'a mut Aliases,
}

impl Collector<'_> {
    /// Records a path written in the current module.
    fn record(&mut self, segments: Vec<String>, written: Written) {
        self.references.push(Reference {
            here: self.here.clone(),
            segments,
            written,
        });
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if !is_test_only(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, module: &'ast ItemMod) {
        if let Some((_, items)) = &module.content {
            self.here.push(module.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.here.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_some() {
            return;
        }
        let mut leaves = Vec::new();
        use_leaves(&item.tree, &mut Vec::new(), &mut leaves);
        for (segments, binding) in leaves {
            match binding {
                Binding::Name(name) => {
                    if name != "_" {
                        let scope = self.aliases.entry(self.here.clone()).or_default();
                        scope.insert(name, segments.clone());
                    }
                    self.record(segments, Written::Use);
                }
                Binding::Glob => self.record(segments, Written::Glob),
            }
        }
    }

    fn visit_impl_item(&mut self, item: &'ast ImplItem) {
        if !is_test_only(impl_item_attrs(item)) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast TraitItem) {
        if !is_test_only(trait_item_attrs(item)) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !is_test_only(&field.attrs) {
            visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !is_test_only(&variant.attrs) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !is_test_only(&local.attrs) {
            visit::visit_local(self, local);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if !is_test_only(&arm.attrs) {
            visit::visit_arm(self, arm);
        }
    }

    fn visit_stmt_macro(&mut self, stmt: &'ast syn::StmtMacro) {
        if !is_test_only(&stmt.attrs) {
            visit::visit_stmt_macro(self, stmt);
        }
    }

    /// Visibility restrictions (`pub(crate)`, `pub(super)`, `pub(in crate::a)`) import nothing.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.record(segments, Written::Code);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        let buffer = TokenBuffer::new2(mac.tokens.clone());
        let mut found = Vec::new();
        token_paths(buffer.begin(), &mut found);
        for segments in found {
            self.record(segments, Written::Code);
        }
    }
}

/// The attributes of an item (none for verbatim tokens).
fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The attributes of an item in an `impl` block.
fn impl_item_attrs(item: &ImplItem) -> &[Attribute] {
    match item {
        ImplItem::Const(i) => &i.attrs,
        ImplItem::Fn(i) => &i.attrs,
        ImplItem::Type(i) => &i.attrs,
        ImplItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// The attributes of an item in a trait.
fn trait_item_attrs(item: &TraitItem) -> &[Attribute] {
    match item {
        TraitItem::Const(i) => &i.attrs,
        TraitItem::Fn(i) => &i.attrs,
        TraitItem::Type(i) => &i.attrs,
        TraitItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// Whether attributes make their item test-only: `#[cfg(...)]` that needs `test`, or a test
/// function attribute (`#[test]`, `#[tokio::test]`).
fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path.is_ident("cfg") {
            attr.parse_args::<Meta>()
                .is_ok_and(|meta| cfg_needs_test(&meta))
        } else {
            path.segments.last().is_some_and(|s| s.ident == "test")
        }
    })
}

/// Whether a `cfg` predicate can only hold when building tests.
fn cfg_needs_test(meta: &Meta) -> bool {
    match meta {
        Meta::Path(path) => path.is_ident("test"),
        Meta::List(list) => {
            let Ok(inner) = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            else {
                return false;
            };
            if list.path.is_ident("all") {
                inner.iter().any(cfg_needs_test)
            } else if list.path.is_ident("any") {
                !inner.is_empty() && inner.iter().all(cfg_needs_test)
            } else {
                false
            }
        }
        Meta::NameValue(_) => false,
    }
}

/// Flattens a `use` tree into its leaves: the full path of each and what it binds.
fn use_leaves(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Binding)>) {
    match tree {
        UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_leaves(&path.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(name) => {
            let (segments, bound) = use_leaf(prefix, &name.ident);
            out.push((segments, Binding::Name(bound)));
        }
        UseTree::Rename(rename) => {
            let (segments, _) = use_leaf(prefix, &rename.ident);
            out.push((segments, Binding::Name(rename.rename.to_string())));
        }
        UseTree::Glob(_) => out.push((prefix.clone(), Binding::Glob)),
        UseTree::Group(group) => {
            for item in &group.items {
                use_leaves(item, prefix, out);
            }
        }
    }
}

/// The full path of a `use` leaf named `ident` under `prefix`, and the name it binds
/// (`a::{self}` is `a` and binds `a`).
fn use_leaf(prefix: &[String], ident: &syn::Ident) -> (Vec<String>, String) {
    if ident == "self" {
        let bound = prefix.last().cloned().unwrap_or_default();
        (prefix.to_vec(), bound)
    } else {
        let mut segments = prefix.to_vec();
        segments.push(ident.to_string());
        (segments, ident.to_string())
    }
}

/// Collects the `a::b::c` paths of two segments or more in macro tokens (`$crate` is read as
/// `crate`).
fn token_paths(mut cursor: Cursor<'_>, out: &mut Vec<Vec<String>>) {
    while !cursor.eof() {
        if let Some((inside, _, _, next)) = cursor.any_group() {
            token_paths(inside, out);
            cursor = next;
        } else if let Some((ident, next)) = cursor.ident() {
            cursor = token_path(ident.to_string(), next, out);
        } else if let Some((punct, next)) = cursor.punct() {
            cursor = match next.ident() {
                Some((ident, after)) if punct.as_char() == '$' && ident == "crate" => {
                    token_path("crate".to_owned(), after, out)
                }
                _ => next,
            };
        } else if let Some((_, next)) = cursor.token_tree() {
            cursor = next;
        } else {
            break;
        }
    }
}

/// Reads the rest of a path in macro tokens that starts with `first`, keeps it when it has
/// two segments or more, and returns the cursor after it.
fn token_path<'a>(first: String, mut cursor: Cursor<'a>, out: &mut Vec<Vec<String>>) -> Cursor<'a> {
    let mut segments = vec![first];
    while let Some((ident, next)) = after_path_separator(cursor).and_then(|c| c.ident()) {
        segments.push(ident.to_string());
        cursor = next;
    }
    if segments.len() > 1 {
        out.push(segments);
    }
    cursor
}

/// The cursor after a `::` at `cursor`, if one is there.
fn after_path_separator(cursor: Cursor<'_>) -> Option<Cursor<'_>> {
    let (first, next) = cursor.punct()?;
    let (second, after) = next.punct()?;
    (first.as_char() == ':' && second.as_char() == ':').then_some(after)
}

/// The folder of a file relative to `src/` (`""` at the top).
fn parent_dir(file: &str) -> &str {
    file.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// A file's name without its folder and `.rs`.
fn file_stem(file: &str) -> &str {
    let name = file.rsplit_once('/').map_or(file, |(_, name)| name);
    name.strip_suffix(".rs").unwrap_or(name)
}

/// `dir/name`, or `name` when `dir` is empty.
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// A relative path with `.` and `..` taken out.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// The value of a `#[path = "..."]` attribute.
fn path_attribute(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The file a `mod name;` declaration at `place` loads, if the crate has it.
fn child_file(place: &Place<'_>, decl: &ItemMod, exists: impl Fn(&str) -> bool) -> Option<String> {
    let dir = parent_dir(place.file);
    let mut base = if place.mod_rs {
        dir.to_owned()
    } else {
        join(dir, file_stem(place.file))
    };
    for module in &place.inline {
        base = join(&base, module);
    }
    if let Some(path) = path_attribute(&decl.attrs) {
        let start = if place.inline.is_empty() {
            dir.to_owned()
        } else {
            base
        };
        return Some(normalize(&join(&start, &path))).filter(|f| exists(f));
    }
    let name = decl.ident.to_string();
    [
        join(&base, &format!("{name}.rs")),
        join(&join(&base, &name), "mod.rs"),
    ]
    .into_iter()
    .find(|f| exists(f))
}

/// The crate roots among a crate's files: `lib.rs`, `main.rs`, `bin/*.rs`, `bin/*/main.rs`.
fn crate_roots(sources: &Sources) -> Vec<String> {
    sources
        .keys()
        .filter(|file| {
            let file = file.as_str();
            file == "lib.rs"
                || file == "main.rs"
                || file.strip_prefix("bin/").is_some_and(|rest| {
                    !rest.contains('/')
                        || rest.split('/').count() == 2 && rest.ends_with("/main.rs")
                })
        })
        .cloned()
        .collect()
}

/// Rebuilds the module tree under the crate root `root` by following `mod` declarations.
fn module_tree(root: &str, parsed: &BTreeMap<String, syn::File>) -> ModuleTree {
    let mut tree = ModuleTree::default();
    let mut pending = vec![(root.to_owned(), ModPath::new(), false)];
    while let Some((file, path, test_only)) = pending.pop() {
        let Some(ast) = parsed.get(&file) else {
            continue;
        };
        if tree.files.contains_key(&file) {
            continue;
        }
        tree.modules.insert(path.clone(), file.clone());
        let mut place = Place {
            file: &file,
            mod_rs: file == root || file_stem(&file) == "mod",
            inline: Vec::new(),
        };
        let found = declared_modules(&ast.items, &mut place, &path, test_only, parsed);
        for (module, holder) in found.inline {
            tree.modules.insert(module, holder);
        }
        pending.extend(found.files);
        tree.files
            .insert(file.clone(), FileModule { path, test_only });
    }
    tree
}

/// The modules one file declares.
#[derive(Default)]
struct Declared {
    /// Inline modules and the file that holds them.
    inline: Vec<(ModPath, String)>,
    /// Files loaded by `mod name;`, with their module and whether they are test-only.
    files: Vec<(String, ModPath, bool)>,
}

/// Reads the `mod` declarations among `items`, written at `place` in module `path`.
fn declared_modules(
    items: &[Item],
    place: &mut Place<'_>,
    path: &ModPath,
    test_only: bool,
    parsed: &BTreeMap<String, syn::File>,
) -> Declared {
    let mut declared = Declared::default();
    for item in items {
        let Item::Mod(decl) = item else { continue };
        let name = decl.ident.to_string();
        let mut child = path.clone();
        child.push(name.clone());
        let child_test_only = test_only || is_test_only(&decl.attrs);
        match &decl.content {
            Some((_, inner)) => {
                declared.inline.push((child.clone(), place.file.to_owned()));
                place.inline.push(name);
                let nested = declared_modules(inner, place, &child, child_test_only, parsed);
                place.inline.pop();
                declared.inline.extend(nested.inline);
                declared.files.extend(nested.files);
            }
            None => {
                if let Some(file) = child_file(place, decl, |f| parsed.contains_key(f)) {
                    declared.files.push((file, child, child_test_only));
                }
            }
        }
    }
    declared
}

/// Resolves paths written in one module tree to the files they name.
struct Resolver<'a> {
    /// The module tree.
    tree: &'a ModuleTree,
    /// The names bound by `use` items in the tree's modules.
    aliases: &'a Aliases,
}

impl Resolver<'_> {
    /// The absolute path that `segments`, written in module `here`, stands for, or `None`
    /// when it names nothing of this crate.
    fn absolute(&self, here: &ModPath, segments: &[String], depth: usize) -> Option<ModPath> {
        let first = segments.first()?;
        match first.as_str() {
            "crate" => Some(segments[1..].to_vec()),
            "self" | "super" => relative(here, segments),
            _ => {
                let mut child = here.clone();
                child.push(first.clone());
                if self.tree.modules.contains_key(&child) {
                    child.extend(segments[1..].iter().cloned());
                    return Some(child);
                }
                let imported = self.aliases.get(here)?.get(first)?;
                if depth >= ALIAS_DEPTH || imported.as_slice() == segments {
                    return None;
                }
                let mut path = self.absolute(here, imported, depth + 1)?;
                path.extend(segments[1..].iter().cloned());
                Some(path)
            }
        }
    }

    /// The file a resolved path lands in (its deepest module that has one) and the name it
    /// takes from there: an item name, `mod name` for a module itself, `*` for a glob.
    fn target(&self, absolute: &[String], written: Written) -> Option<(String, String)> {
        let depth = (0..=absolute.len())
            .rev()
            .find(|&n| self.tree.modules.contains_key(&absolute[..n]))?;
        let file = self.tree.modules[&absolute[..depth]].clone();
        let name = match absolute.get(depth) {
            Some(item) => item.clone(),
            None if written == Written::Glob => "*".to_owned(),
            None => format!("mod {}", absolute.last().map_or("crate", String::as_str)),
        };
        Some((file, name))
    }
}

/// The absolute path of a path that starts with `self` or `super`, written in module `here`.
fn relative(here: &ModPath, segments: &[String]) -> Option<ModPath> {
    let mut path = here.clone();
    let mut rest = segments;
    if rest.first().is_some_and(|s| s == "self") {
        rest = &rest[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        path.pop()?;
        rest = &rest[1..];
    }
    path.extend(rest.iter().cloned());
    Some(path)
}

/// Parses every file of a crate.
fn parse_all(sources: &Sources) -> Result<BTreeMap<String, syn::File>, String> {
    sources
        .iter()
        .map(|(file, text)| {
            syn::parse_file(text)
                .map(|ast| (file.clone(), ast))
                .map_err(|e| format!("{file}: {e}"))
        })
        .collect()
}

/// Adds the files and import edges of one module tree to a crate's graph.
fn add_tree(tree: &ModuleTree, parsed: &BTreeMap<String, syn::File>, graph: &mut FileGraph) {
    let mut aliases = Aliases::new();
    let mut references = Vec::new();
    for (file, module) in &tree.files {
        if module.test_only {
            graph.test_files.insert(file.clone());
            continue;
        }
        graph.files.insert(file.clone());
        let mut collector = Collector {
            here: module.path.clone(),
            references: Vec::new(),
            aliases: &mut aliases,
        };
        collector.visit_file(&parsed[file]);
        references.push((file, collector.references));
    }
    let resolver = Resolver {
        tree,
        aliases: &aliases,
    };
    for (file, found) in references {
        for reference in found {
            // One segment in code is a local name, `self` or an import already counted.
            if reference.written == Written::Code && reference.segments.len() < 2 {
                continue;
            }
            let Some(absolute) = resolver.absolute(&reference.here, &reference.segments, 0) else {
                continue;
            };
            let Some((target, name)) = resolver.target(&absolute, reference.written) else {
                continue;
            };
            if target != *file && !tree.files[&target].test_only {
                let names = graph.edges.entry(file.clone()).or_default();
                names.entry(target).or_default().insert(name);
            }
        }
    }
}

/// Builds the file graph of a crate from its sources.
fn file_graph(sources: &Sources) -> Result<FileGraph, String> {
    let parsed = parse_all(sources)?;
    let mut graph = FileGraph::default();
    for root in crate_roots(sources) {
        add_tree(&module_tree(&root, &parsed), &parsed, &mut graph);
    }
    graph.test_files.retain(|f| !graph.files.contains(f));
    graph.unreached = sources
        .keys()
        .filter(|f| !graph.files.contains(*f) && !graph.test_files.contains(*f))
        .cloned()
        .collect();
    Ok(graph)
}

/// Tarjan's strongly connected components over files numbered `0..next.len()`.
struct Tarjan<'a> {
    /// The files each file has edges to.
    next: &'a [Vec<usize>],
    /// The order in which each file was first reached.
    index: Vec<Option<usize>>,
    /// The lowest index reachable from each file through the current search.
    low: Vec<usize>,
    /// Files of components not yet closed.
    stack: Vec<usize>,
    /// Whether each file is on `stack`.
    on_stack: Vec<bool>,
    /// The next index to hand out.
    counter: usize,
    /// The components found.
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    /// Searches from `file`, closing every component whose root it is.
    fn visit(&mut self, file: usize) {
        self.index[file] = Some(self.counter);
        self.low[file] = self.counter;
        self.counter += 1;
        self.stack.push(file);
        self.on_stack[file] = true;
        let next = self.next;
        for &to in &next[file] {
            match self.index[to] {
                None => {
                    self.visit(to);
                    self.low[file] = self.low[file].min(self.low[to]);
                }
                Some(index) if self.on_stack[to] => self.low[file] = self.low[file].min(index),
                Some(_) => {}
            }
        }
        if self.index[file] == Some(self.low[file]) {
            let mut component = Vec::new();
            while let Some(member) = self.stack.pop() {
                self.on_stack[member] = false;
                component.push(member);
                if member == file {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// The strongly connected components of more than one file, each sorted, largest first.
fn tangles(graph: &FileGraph) -> Vec<BTreeSet<String>> {
    let files: Vec<&String> = graph.files.iter().collect();
    let number = |file: &String| files.binary_search(&file).ok();
    let next: Vec<Vec<usize>> = files
        .iter()
        .map(|file| {
            let targets = graph.edges.get(*file).into_iter().flat_map(BTreeMap::keys);
            targets.filter_map(&number).collect()
        })
        .collect();
    let mut tarjan = Tarjan {
        next: &next,
        index: vec![None; files.len()],
        low: vec![0; files.len()],
        stack: Vec::new(),
        on_stack: vec![false; files.len()],
        counter: 0,
        components: Vec::new(),
    };
    for file in 0..files.len() {
        if tarjan.index[file].is_none() {
            tarjan.visit(file);
        }
    }
    let mut tangles: Vec<BTreeSet<String>> = tarjan
        .components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.into_iter().map(|i| files[i].clone()).collect())
        .collect();
    tangles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    tangles
}

/// The shortest cycle from `start` back to itself through files of `component`, as a chain
/// that begins and ends with `start`.
fn shortest_cycle(edges: &Edges, component: &BTreeSet<String>, start: &str) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(file) = queue.pop_front() {
        for to in edges.get(file).into_iter().flat_map(BTreeMap::keys) {
            if to == start {
                let mut chain = vec![start.to_owned()];
                let mut at = file;
                while at != start {
                    chain.push(at.to_owned());
                    at = came_from[at];
                }
                chain.push(start.to_owned());
                chain.reverse();
                return Some(chain);
            }
            if component.contains(to) && !came_from.contains_key(to.as_str()) {
                came_from.insert(to.as_str(), file);
                queue.push_back(to.as_str());
            }
        }
    }
    None
}

/// A cycle rotated to start at its smallest file, so that rotations compare equal.
fn canonical(chain: &[String]) -> Vec<String> {
    let ring = &chain[..chain.len() - 1];
    let start = (0..ring.len()).min_by_key(|&i| &ring[i]).unwrap_or(0);
    let mut rotated: Vec<String> = ring[start..]
        .iter()
        .chain(&ring[..start])
        .cloned()
        .collect();
    rotated.push(rotated[0].clone());
    rotated
}

/// The distinct shortest cycles through each file of a component, shortest first.
fn cycles_of(edges: &Edges, component: &BTreeSet<String>) -> Vec<Vec<String>> {
    let distinct: BTreeSet<(usize, Vec<String>)> = component
        .iter()
        .filter_map(|file| shortest_cycle(edges, component, file))
        .map(|chain| (chain.len(), canonical(&chain)))
        .collect();
    distinct.into_iter().map(|(_, chain)| chain).collect()
}

/// The failure text for one crate's cycles (empty when it has none).
fn describe_cycles(name: &str, graph: &FileGraph) -> String {
    let tangles = tangles(graph);
    let mut text = String::new();
    if tangles.is_empty() {
        return text;
    }
    let _ = writeln!(
        text,
        "{name}: {} component(s) of files that import each other",
        tangles.len()
    );
    for component in &tangles {
        let files: Vec<&str> = component.iter().map(String::as_str).collect();
        let _ = writeln!(
            text,
            "  component of {} files: {}",
            files.len(),
            files.join(", ")
        );
        for cycle in cycles_of(&graph.edges, component) {
            let _ = writeln!(text, "    {}", cycle.join(" -> "));
        }
    }
    text
}

/// Every edge of a crate's graph, one `from -> to: names` line each, with the files left out.
fn describe_edges(name: &str, graph: &FileGraph) -> String {
    let mut text = format!("# {name}: {} files\n", graph.files.len());
    for (from, targets) in &graph.edges {
        for (to, names) in targets {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let _ = writeln!(
                text,
                "{name}/src/{from} -> {name}/src/{to}: {}",
                names.join(", ")
            );
        }
    }
    for file in &graph.test_files {
        let _ = writeln!(text, "# test-only, not in the graph: {name}/src/{file}");
    }
    for file in &graph.unreached {
        let _ = writeln!(
            text,
            "# not reached by any mod declaration: {name}/src/{file}"
        );
    }
    text
}

/// Reads every `.rs` file under `dir`, keyed by its path relative to `base`.
fn read_sources(base: &Path, dir: &Path, sources: &mut Sources) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            read_sources(base, &path, sources);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path
                .strip_prefix(base)
                .expect("a file under its crate's src");
            let key: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into())
                .collect();
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            sources.insert(key.join("/"), text);
        }
    }
}

/// The workspace members listed in the root `Cargo.toml`.
fn workspace_members(root: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let start = manifest
        .lines()
        .find(|line| line.trim_start().starts_with("members"))
        .and_then(|line| manifest.find(line))
        .expect("a members list in the root Cargo.toml");
    let list = &manifest[start..];
    let open = list.find('[').expect("members = [");
    let close = list.find(']').expect("members = [...]");
    list[open + 1..close]
        .split(',')
        .map(|member| member.trim().trim_matches('"').to_owned())
        .filter(|member| !member.is_empty())
        .collect()
}

#[test]
fn source_files_have_no_import_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let print = std::env::var("PENSTOCK_LAYERS_PRINT").is_ok_and(|v| v == "1");
    let mut failures = String::new();
    for member in workspace_members(root) {
        let src = root.join(&member).join("src");
        if !src.is_dir() {
            continue;
        }
        let mut sources = Sources::new();
        read_sources(&src, &src, &mut sources);
        let graph = file_graph(&sources).unwrap_or_else(|e| panic!("{member}: {e}"));
        if print {
            let mut out = std::io::stdout().lock();
            out.write_all(describe_edges(&member, &graph).as_bytes())
                .expect("writing stdout");
        }
        failures.push_str(&describe_cycles(&member, &graph));
    }
    assert!(
        failures.is_empty(),
        "import cycles between source files (`PENSTOCK_LAYERS_PRINT=1` prints the edges):\n\
         {failures}"
    );
}

/// The layer of a file of the gateway (`gateway/...` under the server's `src/`), lowest
/// first: the foundation (`base/`), sinks and sources (side by side: neither uses the
/// other), the workers, and the files at the top of `gateway/`; None outside the gateway.
fn gateway_layer(file: &str) -> Option<(usize, &'static str)> {
    let rest = file.strip_prefix("gateway/")?;
    Some(match rest.split_once('/') {
        Some(("base", _)) => (0, "base"),
        Some(("sinks", _)) => (1, "sinks"),
        Some(("sources", _)) => (1, "sources"),
        Some(("worker", _)) => (2, "worker"),
        Some((other, _)) => panic!("gateway/{other}/ is in no layer: name its layer here"),
        None if rest == "mod.rs" => (4, "gateway/mod.rs"),
        None => (3, "run"),
    })
}

/// The edges of a graph that go from a lower layer of the gateway to a higher one, or
/// between the two layers side by side, one `from -> to: names` line each.
fn upward_edges(graph: &FileGraph) -> String {
    let mut found = String::new();
    for (from, targets) in &graph.edges {
        let Some((from_rank, from_layer)) = gateway_layer(from) else {
            continue;
        };
        for (to, names) in targets {
            let Some((to_rank, to_layer)) = gateway_layer(to) else {
                continue;
            };
            if to_rank > from_rank || (to_rank == from_rank && to_layer != from_layer) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                found.push_str(&format!("  {from} -> {to}: {}\n", names.join(", ")));
            }
        }
    }
    found
}

#[test]
fn the_gateway_layers_only_use_the_layers_below() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let src = root.join("server").join("src");
    let mut sources = Sources::new();
    read_sources(&src, &src, &mut sources);
    let graph = file_graph(&sources).unwrap_or_else(|e| panic!("server: {e}"));
    assert!(
        graph.files.iter().any(|f| f.starts_with("gateway/base/")),
        "the gateway's foundation was not found under server/src/gateway/base"
    );
    let upward = upward_edges(&graph);
    assert!(
        upward.is_empty(),
        "imports against the gateway's layers (base < sinks, sources < worker < run):\n{upward}"
    );
}

/// Tests of the module tree, the resolver and the cycle finder on small crates in memory.
mod resolver {
    use super::*;

    /// A crate's sources from `(path, text)` pairs.
    fn crate_of(files: &[(&str, &str)]) -> Sources {
        files
            .iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
            .collect()
    }

    /// The graph of a crate, which must parse.
    fn graph_of(files: &[(&str, &str)]) -> FileGraph {
        file_graph(&crate_of(files)).expect("the crate parses")
    }

    /// The names `from` takes from `to` (empty when there is no edge).
    fn names(graph: &FileGraph, from: &str, to: &str) -> Vec<String> {
        let names = graph.edges.get(from).and_then(|targets| targets.get(to));
        names
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The targets of every edge from `from`.
    fn targets(graph: &FileGraph, from: &str) -> Vec<String> {
        graph
            .edges
            .get(from)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_two_file_cycle_is_found() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b::B; pub struct A;"),
            (
                "b.rs",
                "pub struct B; pub fn make() -> crate::a::A { crate::a::A }",
            ),
        ]);
        assert_eq!(names(&graph, "a.rs", "b.rs"), ["B"]);
        assert_eq!(names(&graph, "b.rs", "a.rs"), ["A"]);
        let report = describe_cycles("demo", &graph);
        assert!(
            report.contains("component of 2 files: a.rs, b.rs"),
            "{report}"
        );
        assert!(report.contains("    a.rs -> b.rs -> a.rs\n"), "{report}");
    }

    #[test]
    fn an_acyclic_crate_reports_nothing() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::B;"),
            ("b.rs", "pub struct B(crate::c::C);"),
            ("c.rs", "pub struct C;"),
        ]);
        assert_eq!(targets(&graph, "a.rs"), ["b.rs"]);
        assert_eq!(targets(&graph, "b.rs"), ["c.rs"]);
        assert_eq!(describe_cycles("demo", &graph), "");
    }

    #[test]
    fn a_parent_declaring_a_child_is_not_an_edge() {
        let graph = graph_of(&[
            ("lib.rs", "pub mod a; pub struct Root;"),
            ("a/mod.rs", "pub mod b; pub struct Thing;"),
            ("a/b.rs", "use super::Thing; use crate::Root;"),
        ]);
        assert_eq!(targets(&graph, "lib.rs"), Vec::<String>::new());
        assert_eq!(targets(&graph, "a/mod.rs"), Vec::<String>::new());
        assert_eq!(names(&graph, "a/b.rs", "a/mod.rs"), ["Thing"]);
        assert_eq!(names(&graph, "a/b.rs", "lib.rs"), ["Root"]);
        assert_eq!(describe_cycles("demo", &graph), "");
    }

    #[test]
    fn a_parent_importing_from_its_child_is_an_edge() {
        let graph = graph_of(&[
            ("lib.rs", "mod a;"),
            ("a/mod.rs", "mod b; pub use b::Made; pub struct Config;"),
            ("a/b.rs", "pub struct Made(super::Config);"),
        ]);
        assert_eq!(names(&graph, "a/mod.rs", "a/b.rs"), ["Made"]);
        assert_eq!(names(&graph, "a/b.rs", "a/mod.rs"), ["Config"]);
        assert!(describe_cycles("demo", &graph).contains("a/b.rs -> a/mod.rs -> a/b.rs"));
    }

    #[test]
    fn test_only_code_is_not_counted() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b::B; pub struct A; pub fn f() {}"),
            (
                "b.rs",
                "pub struct B;
                 #[cfg(test)] use crate::a::A;
                 #[cfg(all(test, unix))] fn helper() -> crate::a::A { crate::a::A }
                 #[test] fn direct() { crate::a::f(); }
                 impl B { #[cfg(test)] fn probe() { crate::a::f() } }
                 #[cfg(test)] mod tests { use crate::a::A; }
                 #[cfg(test)] mod more;",
            ),
            ("b/more.rs", "use crate::a::A;"),
        ]);
        assert_eq!(targets(&graph, "b.rs"), Vec::<String>::new());
        assert!(graph.test_files.contains("b/more.rs"));
        assert!(!graph.files.contains("b/more.rs"));
        assert_eq!(describe_cycles("demo", &graph), "");
    }

    #[test]
    fn a_cfg_that_also_holds_outside_tests_is_counted() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "pub struct A;"),
            (
                "b.rs",
                "#[cfg(any(test, feature = \"x\"))] use crate::a::A;",
            ),
        ]);
        assert_eq!(names(&graph, "b.rs", "a.rs"), ["A"]);
    }

    #[test]
    fn super_and_nested_braces_in_use_are_resolved() {
        let graph = graph_of(&[
            ("lib.rs", "mod net; mod store;"),
            ("net/mod.rs", "mod conn; mod wire; pub struct Config;"),
            (
                "net/conn.rs",
                "use super::{Config, wire::{Frame, codec::{self, Codec}}};
                 use crate::store::{self as st, disk::Disk};
                 use self::super::super::store::disk::Space as _;",
            ),
            ("net/wire/mod.rs", "pub mod codec; pub struct Frame;"),
            ("net/wire/codec.rs", "pub struct Codec;"),
            ("store/mod.rs", "pub mod disk;"),
            ("store/disk.rs", "pub struct Disk; pub struct Space;"),
        ]);
        assert_eq!(names(&graph, "net/conn.rs", "net/mod.rs"), ["Config"]);
        assert_eq!(names(&graph, "net/conn.rs", "net/wire/mod.rs"), ["Frame"]);
        assert_eq!(
            names(&graph, "net/conn.rs", "net/wire/codec.rs"),
            ["Codec", "mod codec"]
        );
        assert_eq!(names(&graph, "net/conn.rs", "store/mod.rs"), ["mod store"]);
        assert_eq!(
            names(&graph, "net/conn.rs", "store/disk.rs"),
            ["Disk", "Space"]
        );
    }

    #[test]
    fn paths_in_code_are_resolved_to_the_deepest_module_file() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod c; mod d;"),
            ("a/mod.rs", "pub mod b; pub fn helper() {}"),
            (
                "a/b.rs",
                "pub fn f() {} pub struct Item; impl Item { pub fn new() {} }",
            ),
            ("c.rs", "pub const NAME: &str = \"c\";"),
            (
                "d/mod.rs",
                "mod x;
                 pub fn run() {
                     crate::a::b::f();
                     crate::a::helper();
                     let _ = crate::a::b::Item::new();
                     println!(\"{}\", crate::c::NAME);
                 }",
            ),
            ("d/x.rs", "pub fn y(_: super::super::a::b::Item) {}"),
        ]);
        assert_eq!(names(&graph, "d/mod.rs", "a/b.rs"), ["Item", "f"]);
        assert_eq!(names(&graph, "d/mod.rs", "a/mod.rs"), ["helper"]);
        assert_eq!(names(&graph, "d/mod.rs", "c.rs"), ["NAME"]);
        assert_eq!(names(&graph, "d/x.rs", "a/b.rs"), ["Item"]);
    }

    #[test]
    fn child_modules_and_imported_modules_resolve_without_crate() {
        let graph = graph_of(&[
            ("lib.rs", "mod net; mod app; pub fn start() { app::run(); }"),
            ("net/mod.rs", "pub mod wire;"),
            ("net/wire.rs", "pub struct Frame;"),
            (
                "app.rs",
                "use crate::net; pub fn run() { let _: Option<net::wire::Frame> = None; }",
            ),
        ]);
        assert_eq!(names(&graph, "lib.rs", "app.rs"), ["run"]);
        assert_eq!(names(&graph, "app.rs", "net/wire.rs"), ["Frame"]);
        assert_eq!(names(&graph, "app.rs", "net/mod.rs"), ["mod net"]);
    }

    #[test]
    fn inline_modules_belong_to_their_file() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "pub mod inner { pub struct I; mod deeper { use super::super::super::b::B; } }",
            ),
            ("b.rs", "pub struct B; use crate::a::inner::I;"),
        ]);
        assert_eq!(names(&graph, "b.rs", "a.rs"), ["I"]);
        assert_eq!(names(&graph, "a.rs", "b.rs"), ["B"]);
    }

    #[test]
    fn path_attributes_are_followed() {
        let graph = graph_of(&[
            ("lib.rs", "#[path = \"odd/name.rs\"] mod renamed; mod b;"),
            ("odd/name.rs", "pub struct X;"),
            (
                "b.rs",
                "pub fn f() -> crate::renamed::X { crate::renamed::X }",
            ),
            ("b/unused.rs", ""),
        ]);
        assert_eq!(names(&graph, "b.rs", "odd/name.rs"), ["X"]);
        assert!(graph.unreached.contains("b/unused.rs"));
    }

    #[test]
    fn a_re_export_is_an_edge_to_the_re_exporting_file() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod b; pub use a::A;"),
            ("a.rs", "pub struct A;"),
            ("b.rs", "use crate::A;"),
        ]);
        assert_eq!(names(&graph, "b.rs", "lib.rs"), ["A"]);
        assert_eq!(names(&graph, "lib.rs", "a.rs"), ["A"]);
        assert_eq!(targets(&graph, "b.rs"), ["lib.rs"]);
    }

    #[test]
    fn visibility_restrictions_are_not_edges() {
        let graph = graph_of(&[
            ("lib.rs", "mod a;"),
            ("a/mod.rs", "mod b;"),
            (
                "a/b.rs",
                "pub(crate) fn f() {} pub(super) struct S; pub(in crate::a) fn g() {}",
            ),
        ]);
        assert_eq!(targets(&graph, "a/b.rs"), Vec::<String>::new());
    }

    #[test]
    fn macro_rules_bodies_count_their_crate_paths() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod m;"),
            ("a.rs", "pub fn f() {}"),
            ("m.rs", "macro_rules! call { () => { $crate::a::f() }; }"),
        ]);
        assert_eq!(names(&graph, "m.rs", "a.rs"), ["f"]);
    }

    #[test]
    fn the_shortest_cycles_of_a_component_are_listed() {
        let graph = graph_of(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::B; pub struct A;"),
            ("b.rs", "use crate::c::C; use crate::a::A; pub struct B;"),
            ("c.rs", "use crate::a::A; pub struct C;"),
        ]);
        let report = describe_cycles("demo", &graph);
        assert!(
            report.contains("component of 3 files: a.rs, b.rs, c.rs"),
            "{report}"
        );
        assert!(report.contains("    a.rs -> b.rs -> a.rs\n"), "{report}");
        assert!(
            report.contains("    a.rs -> b.rs -> c.rs -> a.rs\n"),
            "{report}"
        );
        let first = report.find("b.rs -> a.rs").expect("the two-file cycle");
        assert!(first < report.find("c.rs -> a.rs").expect("the three-file cycle"));
    }

    #[test]
    fn binary_roots_have_their_own_tree() {
        let graph = graph_of(&[
            ("lib.rs", "pub mod a;"),
            ("a.rs", "pub struct A;"),
            ("main.rs", "mod cli; fn main() { cli::go() }"),
            ("cli.rs", "pub fn go() { crate::helper(); } "),
            ("bin/tool.rs", "fn main() {}"),
        ]);
        assert!(graph.files.contains("cli.rs"));
        assert!(graph.files.contains("bin/tool.rs"));
        assert_eq!(names(&graph, "main.rs", "cli.rs"), ["go"]);
        assert_eq!(names(&graph, "cli.rs", "main.rs"), ["helper"]);
    }

    #[test]
    fn an_import_from_a_lower_layer_of_the_gateway_to_a_higher_one_is_found() {
        let mut graph = FileGraph::default();
        let add = |graph: &mut FileGraph, from: &str, to: &str| {
            graph
                .edges
                .entry(from.to_string())
                .or_default()
                .entry(to.to_string())
                .or_default()
                .insert("X".to_string());
        };
        add(&mut graph, "gateway/worker/mod.rs", "gateway/base/job.rs");
        add(&mut graph, "gateway/run.rs", "gateway/worker/mod.rs");
        add(&mut graph, "query/mod.rs", "gateway/base/telemetry.rs");
        assert_eq!(upward_edges(&graph), "");
        add(
            &mut graph,
            "gateway/base/telemetry.rs",
            "gateway/sinks/mod.rs",
        );
        add(
            &mut graph,
            "gateway/sources/file.rs",
            "gateway/sinks/account.rs",
        );
        let found = upward_edges(&graph);
        assert!(
            found.contains("gateway/base/telemetry.rs -> gateway/sinks/mod.rs"),
            "{found}"
        );
        assert!(
            found.contains("gateway/sources/file.rs -> gateway/sinks/account.rs"),
            "{found}"
        );
        assert_eq!(found.lines().count(), 2, "{found}");
    }
}
