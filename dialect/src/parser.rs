//! The parser: Penstock's statements are parsed here, expressions and queries by sqlparser
//! (over the same token stream, so every location is exact).
//!
//! A statement that does not parse is reported and skipped: parsing resumes at the next
//! statement (the next `;` or `END` in a pipeline's body, the next `CREATE` outside one), so
//! one pass finds the syntax errors of every statement.

use sqlparser::ast::Ident;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use crate::ast::*;
use crate::error::{Located, Location};
use crate::model::AttrScope;
use crate::syntax::PenstockDialect;

type Result<T> = std::result::Result<T, Located>;

/// Deepest expression nesting accepted.
const RECURSION_LIMIT: usize = 64;

/// The dialect expressions and queries are parsed in.
static DIALECT: PenstockDialect = PenstockDialect;

/// Parses the text of a pipeline file: the statements that parse, and an error for each that
/// does not (in order).
pub(crate) fn parse(sql: &str) -> (File, Vec<Located>) {
    let eof = end_of(sql);
    let tokens = match Tokenizer::new(&DIALECT, sql).tokenize_with_location() {
        Ok(tokens) => tokens,
        Err(e) => {
            let mut error = Located::from(ParserError::from(e));
            if error.location.line == 0 {
                error.location = eof;
            }
            return (
                File {
                    statements: Vec::new(),
                },
                vec![error],
            );
        }
    };
    let mut p = FileParser {
        p: parser(tokens.clone()),
        tokens,
        offset: 0,
        limit: None,
        eof,
        unclosed: false,
        errors: Vec::new(),
    };
    let file = p.file();
    let mut errors = p.errors;
    for e in &mut errors {
        if e.location.line == 0 {
            e.location = eof;
        }
    }
    (file, errors)
}

/// One SQL expression, the whole of `text` (a sink's `key`, say).
pub(crate) fn parse_expression(text: &str) -> std::result::Result<sqlparser::ast::Expr, Located> {
    let tokens = Tokenizer::new(&DIALECT, text)
        .tokenize_with_location()
        .map_err(|e| Located::new(Location::default(), e.message))?;
    let mut p = parser(tokens);
    let expr = p.parse_expr()?;
    match p.peek_token().token {
        Token::EOF => Ok(expr),
        other => Err(Located::new(
            Location::default(),
            format!("unexpected {other} after the expression"),
        )),
    }
}

/// A sqlparser parser over `tokens`.
fn parser(tokens: Vec<TokenWithSpan>) -> Parser<'static> {
    Parser::new(&DIALECT)
        .with_recursion_limit(RECURSION_LIMIT)
        .with_tokens_with_locations(tokens)
}

/// The position just after the last non-blank character (where "end of file" is reported).
fn end_of(sql: &str) -> Location {
    let trimmed = sql.trim_end();
    let line = trimmed.lines().count().max(1) as u64;
    let last = trimmed.rsplit('\n').next().unwrap_or("");
    Location {
        line,
        column: last.chars().count() as u64 + 1,
    }
}

struct FileParser {
    /// The parser, over `tokens[offset..]` (or one statement of them, see
    /// [`FileParser::bound`]).
    p: Parser<'static>,
    /// Every token of the file.
    tokens: Vec<TokenWithSpan>,
    offset: usize,
    /// The `CREATE` the parser stops before, when it is bounded to one statement.
    limit: Option<TokenWithSpan>,
    eof: Location,
    /// Whether the pipeline just parsed lacks its END.
    unclosed: bool,
    /// The errors found so far.
    errors: Vec<Located>,
}

fn is_word(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn describe(token: &TokenWithSpan) -> String {
    match &token.token {
        Token::EOF => "end of file".to_string(),
        other => format!("{other}"),
    }
}

impl FileParser {
    fn peek(&self) -> TokenWithSpan {
        self.p.peek_token()
    }

    fn peek_word(&self, word: &str) -> bool {
        is_word(&self.peek().token, word)
    }

    fn eat_word(&mut self, word: &str) -> bool {
        let yes = self.peek_word(word);
        if yes {
            self.p.next_token();
        }
        yes
    }

    fn expected<T>(&self, what: &str) -> Result<T> {
        let mut found = self.peek();
        if let (Token::EOF, Some(limit)) = (&found.token, &self.limit) {
            found = limit.clone();
        }
        let location = match found.token {
            Token::EOF => self.eof,
            _ => Location::of(found.span),
        };
        Err(Located::new(
            location,
            format!("expected {what}, found {}", describe(&found)),
        ))
    }

    fn expect_word(&mut self, word: &str, what: &str) -> Result<Location> {
        let location = Location::of(self.peek().span);
        if self.eat_word(word) {
            Ok(location)
        } else {
            self.expected(what)
        }
    }

    fn expect_token(&mut self, token: &Token, what: &str) -> Result<()> {
        if self.p.consume_token(token) {
            Ok(())
        } else {
            self.expected(what)
        }
    }

    fn identifier(&mut self, what: &str) -> Result<Ident> {
        match self.peek().token {
            Token::Word(_) => Ok(self.p.parse_identifier()?),
            _ => self.expected(what),
        }
    }

    fn string(&mut self, what: &str) -> Result<StringLit> {
        let token = self.peek();
        match token.token {
            Token::SingleQuotedString(s) => {
                self.p.next_token();
                Ok(StringLit {
                    value: s,
                    location: Location::of(token.span),
                })
            }
            _ => self.expected(what),
        }
    }

    fn at_end(&self) -> bool {
        matches!(self.peek().token, Token::EOF)
    }

    /// The absolute index (in `tokens`) of the parser's next token.
    fn position(&self) -> usize {
        self.offset + self.p.index()
    }

    /// Moves the parser to the absolute token index `index`: forward by reading tokens (so
    /// parsing a file reads each token once), back by parsing anew from there (after an error
    /// that read past where parsing resumes).
    fn seek(&mut self, index: usize) {
        let index = index.min(self.tokens.len());
        if index < self.position() {
            self.p = parser(self.tokens[index..].to_vec());
            self.offset = index;
            return;
        }
        while self.next_significant(self.position()) < index {
            self.p.next_token();
        }
    }

    /// The index of the first token from `from` that is not whitespace (or the end).
    fn next_significant(&self, from: usize) -> usize {
        self.tokens
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
            .map_or(self.tokens.len(), |(i, _)| i)
    }

    /// Gives the parser the statement from token `start` to token `stop` (see
    /// [`Self::end_of_statement`] and [`Self::next_create`]) as the rest of the file, up to the
    /// `;` or `END` that ends it; a `CREATE` there is left out (sqlparser would read it as an
    /// alias or a name). Returns the parser of the file and its offset, for
    /// [`Self::unbound`].
    fn bound(&mut self, start: usize, stop: usize) -> (Parser<'static>, usize) {
        let limit = self
            .tokens
            .get(stop)
            .filter(|t| is_word(&t.token, "CREATE"))
            .cloned();
        let end = match (&limit, stop < self.tokens.len()) {
            (None, true) => stop + 1,
            _ => stop,
        };
        self.limit = limit;
        let file = std::mem::replace(&mut self.p, parser(self.tokens[start..end].to_vec()));
        (file, std::mem::replace(&mut self.offset, start))
    }

    /// Gives the parser of the file (from [`Self::bound`]) back.
    fn unbound(&mut self, (file, offset): (Parser<'static>, usize)) {
        self.p = file;
        self.offset = offset;
        self.limit = None;
    }

    /// `e`, from sqlparser at the end of a bounded statement (see [`Self::bound`]), put where
    /// the `CREATE` after it is.
    fn at_limit(&self, mut e: Located) -> Located {
        if let Some(limit) = &self.limit
            && e.location.line == 0
        {
            e.location = Location::of(limit.span);
            e.message = e.message.replace("found EOF", "found CREATE");
        }
        e
    }

    /// The index of the first unquoted `CREATE` after the first token from `from` (or the end):
    /// where the next top-level statement starts.
    fn next_create(&self, from: usize) -> usize {
        let first = self.next_significant(from);
        self.tokens
            .iter()
            .enumerate()
            .skip(first + 1)
            .find(|(_, t)| is_word(&t.token, "CREATE"))
            .map_or(self.tokens.len(), |(i, _)| i)
    }

    /// The index of the first token from `from` that ends a statement of a pipeline's body:
    /// `;`, an `END` that closes no `CASE`, a `CREATE` (the body lacks its `END`), or the end.
    fn end_of_statement(&self, from: usize) -> usize {
        let mut cases = 0usize;
        for (i, t) in self.tokens.iter().enumerate().skip(from) {
            match &t.token {
                Token::SemiColon => return i,
                token if is_word(token, "CREATE") => return i,
                token if is_word(token, "CASE") => cases += 1,
                token if is_word(token, "END") => match cases.checked_sub(1) {
                    Some(open) => cases = open,
                    None => return i,
                },
                _ => {}
            }
        }
        self.tokens.len()
    }

    fn file(&mut self) -> File {
        let mut statements = Vec::new();
        loop {
            while self.p.consume_token(&Token::SemiColon) {}
            if self.at_end() {
                return File { statements };
            }
            let start = self.position();
            let stop = self.next_create(start);
            // A pipeline's body is bounded statement by statement.
            let file = (!self.starts_pipeline(start)).then(|| self.bound(start, stop));
            let parsed = self.statement();
            let resume = self.keep(parsed, &mut statements, stop, |p| p.after_definition(stop));
            if let Some(file) = file {
                self.unbound(file);
            }
            self.seek(resume);
        }
    }

    /// Keeps a statement that parsed (in `statements`) and returns where parsing resumes after
    /// it (`after`); reports one that did not and returns `stop`, where the next statement
    /// starts.
    fn keep<T>(
        &mut self,
        parsed: Result<T>,
        statements: &mut Vec<T>,
        stop: usize,
        after: impl FnOnce(&mut Self) -> usize,
    ) -> usize {
        match parsed {
            Ok(statement) => {
                statements.push(statement);
                after(self)
            }
            Err(e) => {
                let e = self.at_limit(e);
                self.errors.push(e);
                stop
            }
        }
    }

    /// Whether the statement at token `start` is `CREATE PIPELINE`.
    fn starts_pipeline(&self, start: usize) -> bool {
        let create = self.next_significant(start);
        let next = self.next_significant(create + 1);
        let word = |i: usize, w: &str| self.tokens.get(i).is_some_and(|t| is_word(&t.token, w));
        word(create, "CREATE") && word(next, "PIPELINE")
    }

    /// Where parsing resumes after a top-level statement, whose next statement starts at
    /// `stop`: after its `;`, or at `stop` (a missing `;` is reported, unless the statement is
    /// a pipeline reported for its missing END).
    fn after_definition(&mut self, stop: usize) -> usize {
        let unclosed = std::mem::take(&mut self.unclosed);
        let at_end = self.at_end() && self.limit.is_none();
        if unclosed || at_end || self.p.consume_token(&Token::SemiColon) {
            return self.position().min(stop);
        }
        let missing = self.expected::<()>("';' after the statement");
        self.errors.extend(missing.err());
        stop
    }

    fn statement(&mut self) -> Result<Statement> {
        let location = Location::of(self.peek().span);
        for inner in ["ALTER", "UPDATE", "DELETE", "INSERT"] {
            if self.peek_word(inner) {
                return Err(Located::new(
                    location,
                    format!(
                        "{inner} must be inside CREATE PIPELINE name FROM source AS BEGIN ... END"
                    ),
                ));
            }
        }
        self.expect_word(
            "CREATE",
            "CREATE SOURCE, CREATE SINK, CREATE TABLE or CREATE PIPELINE",
        )?;
        if self.eat_word("SOURCE") {
            self.source(location).map(Statement::Source)
        } else if self.eat_word("SINK") {
            self.sink(location).map(Statement::Sink)
        } else if self.eat_word("PIPELINE") {
            self.pipeline(location).map(Statement::Pipeline)
        } else if self.eat_word("TABLE") {
            self.table(location).map(Statement::Table)
        } else {
            self.expected("SOURCE, SINK, TABLE or PIPELINE after CREATE")
        }
    }

    fn table(&mut self, location: Location) -> Result<CreateTable> {
        let name = self.identifier("a table name")?;
        self.expect_word("FROM", "FROM FILE after the table name")?;
        self.expect_word(
            "FILE",
            "FILE after FROM (a lookup table is read from a file)",
        )?;
        let options = self.options()?;
        Ok(CreateTable {
            location,
            name,
            options,
        })
    }

    fn source(&mut self, location: Location) -> Result<CreateSource> {
        let name = self.identifier("a source name")?;
        self.expect_word("FROM", "FROM after the source name")?;
        let Some(kind) = SourceKind::ALL
            .into_iter()
            .find(|k| self.peek_word(k.keyword()))
        else {
            return self.expected("a source kind: GRPC, HTTP, GENERATOR, FILE or KAFKA");
        };
        self.p.next_token();
        let options = self.options()?;
        Ok(CreateSource {
            location,
            name,
            kind,
            options,
        })
    }

    fn sink(&mut self, location: Location) -> Result<CreateSink> {
        let name = self.identifier("a sink name")?;
        self.expect_word("TO", "TO after the sink name")?;
        let Some(kind) = SinkKind::ALL
            .into_iter()
            .find(|k| self.peek_word(k.keyword()))
        else {
            return self.expected("a sink kind: OTAP, OTLP, OTLP_HTTP, FILE, CONSOLE or KAFKA");
        };
        self.p.next_token();
        let options = self.options()?;
        Ok(CreateSink {
            location,
            name,
            kind,
            options,
        })
    }

    fn options(&mut self) -> Result<Vec<OptionEntry>> {
        if !self.eat_word("WITH") {
            return Ok(Vec::new());
        }
        self.expect_token(&Token::LParen, "'(' after WITH")?;
        let mut options = Vec::new();
        loop {
            let key = self.identifier("an option name")?;
            self.expect_token(&Token::Eq, "'=' after the option name")?;
            let value = self.p.parse_expr()?;
            options.push(OptionEntry { key, value });
            if !self.p.consume_token(&Token::Comma) {
                break;
            }
        }
        self.expect_token(&Token::RParen, "',' or ')' in the WITH list")?;
        Ok(options)
    }

    fn pipeline(&mut self, location: Location) -> Result<CreatePipeline> {
        let name = self.identifier("a pipeline name")?;
        self.expect_word("FROM", "FROM after the pipeline name")?;
        let source = self.identifier("a source name after FROM")?;
        let options = self.options()?;
        self.expect_word("AS", "AS BEGIN after the source name (or its WITH list)")?;
        self.expect_word("BEGIN", "BEGIN after AS")?;
        let body = self.body(&name, location);
        Ok(CreatePipeline {
            location,
            name,
            source,
            options,
            body,
        })
    }

    /// The statements of pipeline `name` (begun at `location`) up to its `END`: a statement
    /// that does not parse is reported and skipped; a `CREATE` or the end of the file where a
    /// statement or `END` should be ends the body with an error.
    fn body(&mut self, name: &Ident, location: Location) -> Vec<PipelineStatement> {
        let mut body = Vec::new();
        loop {
            while self.p.consume_token(&Token::SemiColon) {}
            if self.eat_word("END") {
                return body;
            }
            if self.at_end() || self.peek_word("CREATE") {
                let missing = self.expected::<()>("END").err().map(|e| Located {
                    message: format!(
                        "missing END for pipeline '{}' begun at line {}",
                        name.value, location.line
                    ),
                    ..e
                });
                self.errors.extend(missing);
                self.unclosed = true;
                return body;
            }
            let start = self.position();
            let stop = self.end_of_statement(start);
            let file = self.bound(start, stop);
            let parsed = self.pipeline_statement();
            let resume = self.keep(parsed, &mut body, stop, |p| p.after_statement(stop));
            self.unbound(file);
            self.seek(resume);
        }
    }

    /// Where parsing resumes after a statement of a pipeline's body that ends before `stop`:
    /// `stop` when the statement ends there (at its `;`, `END`, or the end), else the next
    /// statement keyword after the missing `;` (reported), or `stop`.
    fn after_statement(&mut self, stop: usize) -> usize {
        if self.at_end() || self.peek_word("END") || self.p.consume_token(&Token::SemiColon) {
            return stop;
        }
        let missing = self.expected::<()>("';' after the statement");
        self.errors.extend(missing.err());
        let next = ["ALTER", "UPDATE", "DELETE", "INSERT"]
            .into_iter()
            .any(|word| self.peek_word(word));
        if next { self.position() } else { stop }
    }

    fn pipeline_statement(&mut self) -> Result<PipelineStatement> {
        let location = Location::of(self.peek().span);
        if self.eat_word("ALTER") {
            self.alter(location)
        } else if self.eat_word("UPDATE") {
            self.update(location).map(PipelineStatement::Update)
        } else if self.eat_word("DELETE") {
            self.delete(location).map(PipelineStatement::Delete)
        } else if self.eat_word("INSERT") {
            self.insert(location).map(PipelineStatement::Insert)
        } else {
            self.expected("ALTER TABLE, UPDATE, DELETE FROM, INSERT INTO or END")
        }
    }

    fn alter(&mut self, location: Location) -> Result<PipelineStatement> {
        self.expect_word("TABLE", "TABLE after ALTER")?;
        let table = self.identifier("a table name: logs, spans or metrics")?;
        if self.eat_word("LIMIT") {
            return self
                .limit(location, table)
                .map(|l| PipelineStatement::Limit(Box::new(l)));
        }
        let rename = if self.eat_word("RENAME") {
            true
        } else if self.eat_word("DROP") {
            false
        } else {
            return self.expected("RENAME, DROP or LIMIT after the table name");
        };
        let scope = if self.eat_word("RESOURCE") {
            AttrScope::Resource
        } else if self.eat_word("SCOPE") {
            AttrScope::Scope
        } else {
            AttrScope::Record
        };
        self.expect_word(
            "ATTRIBUTE",
            "ATTRIBUTE (optionally after RESOURCE or SCOPE)",
        )?;
        let action = if rename {
            let mut pairs = Vec::new();
            loop {
                let from = self.string("the attribute key to rename, as a 'string'")?;
                self.expect_word("TO", "TO after the attribute key")?;
                let to = self.string("the new attribute key, as a 'string'")?;
                pairs.push((from, to));
                if !self.p.consume_token(&Token::Comma) {
                    break;
                }
            }
            AttrAction::Rename(pairs)
        } else {
            let mut keys = Vec::new();
            loop {
                keys.push(self.string("the attribute key to drop, as a 'string'")?);
                if !self.p.consume_token(&Token::Comma) {
                    break;
                }
            }
            AttrAction::Drop(keys)
        };
        Ok(PipelineStatement::Alter(AlterAttributes {
            location,
            table,
            scope,
            action,
        }))
    }

    /// `RATE n PER key [INTO sink]` or `SERIES n PER key [DROP]`, after `ALTER TABLE t LIMIT`.
    fn limit(&mut self, location: Location, table: Ident) -> Result<Limit> {
        let kind = if self.eat_word("RATE") {
            LimitKind::Rate
        } else if self.eat_word("SERIES") {
            LimitKind::Series
        } else {
            return self.expected("RATE or SERIES after LIMIT");
        };
        let count = self.p.parse_expr()?;
        self.expect_word("PER", "PER and the key after the bound")?;
        let per = self.p.parse_expr()?;
        let (into, drop) = match kind {
            LimitKind::Rate if self.eat_word("INTO") => (
                Some(self.identifier("the sink the rows past the rate go to")?),
                false,
            ),
            LimitKind::Series => (None, self.eat_word("DROP")),
            LimitKind::Rate => (None, false),
        };
        Ok(Limit {
            location,
            table,
            kind,
            count,
            per,
            into,
            drop,
        })
    }

    fn update(&mut self, location: Location) -> Result<Update> {
        let table = self.identifier("a table name: logs, spans or metrics")?;
        self.expect_word("SET", "SET after the table name")?;
        let mut assignments = Vec::new();
        loop {
            let at = Location::of(self.peek().span);
            let target = self.target()?;
            self.expect_token(&Token::Eq, "'=' after the column to set")?;
            let value = self.p.parse_expr()?;
            assignments.push(Assignment {
                location: at,
                target,
                value,
            });
            if !self.p.consume_token(&Token::Comma) {
                break;
            }
        }
        let from = if self.eat_word("FROM") {
            let joined = self.identifier("a lookup table's name after FROM")?;
            self.eat_word("AS");
            let alias = if self.peek_word("WHERE") || self.at_end() {
                None
            } else if matches!(self.peek().token, Token::Word(_)) {
                Some(self.identifier("an alias of the lookup table")?)
            } else {
                None
            };
            Some(Joined {
                table: joined,
                alias,
            })
        } else {
            None
        };
        let selection = self.selection()?;
        Ok(Update {
            location,
            table,
            assignments,
            from,
            selection,
        })
    }

    fn target(&mut self) -> Result<Target> {
        let mut parts = vec![self.identifier("a column or attributes['key'] to set")?];
        while self.p.consume_token(&Token::Period) {
            parts.push(self.identifier("a name after '.'")?);
        }
        let path: Vec<String> = parts.iter().map(|p| p.value.to_lowercase()).collect();
        if !self.p.consume_token(&Token::LBracket) {
            return Ok(match AttrScope::from_path(&path) {
                Some(scope) => Target::Attrs {
                    scope,
                    location: Location::of(parts[0].span),
                },
                None => Target::Field(parts),
            });
        }
        let Some(scope) = AttrScope::from_path(&path) else {
            return Err(Located::at(
                parts[0].span,
                "expected attributes['key'], resource.attributes['key'] or scope.attributes['key']",
            ));
        };
        let key = self.string("an attribute key as a 'string'")?;
        self.expect_token(&Token::RBracket, "']' after the attribute key")?;
        Ok(Target::Attr { scope, key })
    }

    fn selection(&mut self) -> Result<Option<sqlparser::ast::Expr>> {
        if self.eat_word("WHERE") {
            Ok(Some(self.p.parse_expr()?))
        } else {
            Ok(None)
        }
    }

    fn delete(&mut self, location: Location) -> Result<Delete> {
        self.expect_word("FROM", "FROM after DELETE")?;
        let table = self.identifier("a table name: logs, spans or metrics")?;
        let selection = self.selection()?;
        Ok(Delete {
            location,
            table,
            selection,
        })
    }

    fn insert(&mut self, location: Location) -> Result<Insert> {
        self.expect_word("INTO", "INTO after INSERT")?;
        let sink = self.identifier("a sink name after INSERT INTO")?;
        if !self.peek_word("SELECT") && !matches!(self.peek().token, Token::LParen) {
            return self.expected("SELECT after the sink name");
        }
        let query = self.p.parse_query()?;
        Ok(Insert {
            location,
            sink,
            query,
        })
    }
}
