//! The parser: Penstock's statements are parsed here, expressions and queries by sqlparser
//! (over the same token stream, so every location is exact).

use sqlparser::ast::Ident;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::ast::*;
use crate::error::{Located, Location};
use crate::model::AttrScope;

type Result<T> = std::result::Result<T, Located>;

/// Deepest expression nesting accepted.
const RECURSION_LIMIT: usize = 64;

/// Parses the text of a pipeline file.
pub(crate) fn parse(sql: &str) -> Result<File> {
    let dialect = GenericDialect {};
    let parser = Parser::new(&dialect)
        .with_recursion_limit(RECURSION_LIMIT)
        .try_with_sql(sql)?;
    let eof = end_of(sql);
    let mut p = FileParser { p: parser, eof };
    p.file().map_err(|mut e| {
        if e.location.line == 0 {
            e.location = eof;
        }
        e
    })
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

struct FileParser<'a> {
    p: Parser<'a>,
    eof: Location,
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

impl FileParser<'_> {
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
        let found = self.peek();
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

    fn file(&mut self) -> Result<File> {
        let mut statements = Vec::new();
        loop {
            while self.p.consume_token(&Token::SemiColon) {}
            if self.at_end() {
                return Ok(File { statements });
            }
            statements.push(self.statement()?);
            if !self.at_end() {
                self.expect_token(&Token::SemiColon, "';' after the statement")?;
            }
        }
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
        self.expect_word("CREATE", "CREATE SOURCE, CREATE SINK or CREATE PIPELINE")?;
        if self.eat_word("SOURCE") {
            self.source(location).map(Statement::Source)
        } else if self.eat_word("SINK") {
            self.sink(location).map(Statement::Sink)
        } else if self.eat_word("PIPELINE") {
            self.pipeline(location).map(Statement::Pipeline)
        } else {
            self.expected("SOURCE, SINK or PIPELINE after CREATE")
        }
    }

    fn source(&mut self, location: Location) -> Result<CreateSource> {
        let name = self.identifier("a source name")?;
        self.expect_word("FROM", "FROM after the source name")?;
        let Some(kind) = SourceKind::ALL
            .into_iter()
            .find(|k| self.peek_word(k.keyword()))
        else {
            return self.expected("a source kind: GRPC, HTTP, GENERATOR or FILE");
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
            return self.expected("a sink kind: OTAP, OTLP, FILE or CONSOLE");
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
        self.expect_word("AS", "AS BEGIN after the source name")?;
        self.expect_word("BEGIN", "BEGIN after AS")?;
        let mut body = Vec::new();
        loop {
            while self.p.consume_token(&Token::SemiColon) {}
            if self.eat_word("END") {
                break;
            }
            if self.at_end() {
                return self.expected("END to close the pipeline");
            }
            body.push(self.pipeline_statement()?);
            if !self.peek_word("END") {
                self.expect_token(&Token::SemiColon, "';' after the statement")?;
            }
        }
        Ok(CreatePipeline {
            location,
            name,
            source,
            body,
        })
    }

    fn pipeline_statement(&mut self) -> Result<PipelineStatement> {
        let location = Location::of(self.peek().span);
        if self.eat_word("ALTER") {
            self.alter(location).map(PipelineStatement::Alter)
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

    fn alter(&mut self, location: Location) -> Result<AlterAttributes> {
        self.expect_word("TABLE", "TABLE after ALTER")?;
        let table = self.identifier("a table name: logs, spans or metrics")?;
        let rename = if self.eat_word("RENAME") {
            true
        } else if self.eat_word("DROP") {
            false
        } else {
            return self.expected("RENAME or DROP after the table name");
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
        Ok(AlterAttributes {
            location,
            table,
            scope,
            action,
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
        let selection = self.selection()?;
        Ok(Update {
            location,
            table,
            assignments,
            selection,
        })
    }

    fn target(&mut self) -> Result<Target> {
        let mut parts = vec![self.identifier("a column or attributes['key'] to set")?];
        while self.p.consume_token(&Token::Period) {
            parts.push(self.identifier("a name after '.'")?);
        }
        if !self.p.consume_token(&Token::LBracket) {
            return Ok(Target::Field(parts));
        }
        let path: Vec<String> = parts.iter().map(|p| p.value.to_lowercase()).collect();
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
