//! `loghaul top`: a terminal view of a running server through its API (`GET /graph` once a
//! second): per component events and bytes a second in and out, errors, drops, buffer fill,
//! open connections and health. Sortable; `q` quits and gives the terminal back as it was.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};
use serde_json::Value;

use crate::tap_client::Api;

/// How often the server is asked.
const REFRESH: Duration = Duration::from_secs(1);

/// The columns, in order; a sort key is one of them.
const COLUMNS: [&str; 11] = [
    "ID",
    "KIND",
    "TYPE",
    "EVENTS IN/s",
    "EVENTS OUT/s",
    "BYTES IN/s",
    "BYTES OUT/s",
    "ERRORS",
    "DROPPED",
    "BUFFER",
    "CONN",
];

/// One component's row, with the rates since the last poll.
#[derive(Clone, Debug, Default)]
struct Row_ {
    id: String,
    kind: String,
    component_type: String,
    events_in: f64,
    events_out: f64,
    bytes_in: f64,
    bytes_out: f64,
    errors: u64,
    dropped: u64,
    buffer: String,
    buffer_fill: f64,
    connections: Option<i64>,
    health: String,
    reason: Option<String>,
}

/// What the view shows: the last poll, and what the rates are computed against.
#[derive(Default)]
struct View {
    rows: Vec<Row_>,
    previous: HashMap<String, (Instant, [u64; 4])>,
    header: String,
    error: Option<String>,
    sort: usize,
    descending: bool,
}

impl View {
    /// Takes one `/graph` answer.
    fn update(&mut self, graph: &Value, now: Instant) {
        let mut rows = Vec::new();
        let mut previous = HashMap::new();
        for c in graph["components"].as_array().into_iter().flatten() {
            let id = c["id"].as_str().unwrap_or("?").to_owned();
            let n = |k: &str| c[k].as_u64().unwrap_or(0);
            let counters = [
                n("received_events"),
                n("sent_events"),
                n("received_bytes"),
                n("sent_bytes"),
            ];
            let rate = |i: usize| match self.previous.get(&id) {
                Some((then, before)) => {
                    let dt = now.duration_since(*then).as_secs_f64();
                    if dt > 0.0 {
                        counters[i].saturating_sub(before[i]) as f64 / dt
                    } else {
                        0.0
                    }
                }
                None => 0.0,
            };
            let (buffer, fill) = match (&c["buffer_batches"], c["buffer_events"].as_i64()) {
                (Value::Array(b), Some(events)) => {
                    let queued = b.first().and_then(Value::as_i64).unwrap_or(0);
                    let max = b.get(1).and_then(Value::as_i64).unwrap_or(0);
                    let fill = if max > 0 {
                        queued as f64 / max as f64
                    } else {
                        0.0
                    };
                    (format!("{events} ev {:.0}%", fill * 100.0), fill)
                }
                _ => ("-".to_owned(), 0.0),
            };
            rows.push(Row_ {
                id: id.clone(),
                kind: c["kind"].as_str().unwrap_or("").to_owned(),
                component_type: c["type"].as_str().unwrap_or("").to_owned(),
                events_in: rate(0),
                events_out: rate(1),
                bytes_in: rate(2),
                bytes_out: rate(3),
                errors: n("errors"),
                dropped: n("discarded"),
                buffer,
                buffer_fill: fill,
                connections: c["open_connections"].as_i64(),
                health: c["health"].as_str().unwrap_or("").to_owned(),
                reason: c["reason"].as_str().map(str::to_owned),
            });
            previous.insert(id, (now, counters));
        }
        self.previous = previous;
        self.rows = rows;
        let memory = match (
            graph["memory"]["used"].as_u64(),
            graph["memory"]["limit"].as_u64(),
        ) {
            (Some(used), Some(limit)) => {
                format!("memory {} of {}", bytes(used as f64), bytes(limit as f64))
            }
            _ => String::new(),
        };
        let reload = match graph["last_reload"]["result"].as_str() {
            Some(result) => format!(
                "last reload {result} at {}",
                graph["last_reload"]["time"].as_str().unwrap_or("?")
            ),
            None => "no reload".to_owned(),
        };
        let uptime = graph["uptime_ms"].as_u64().unwrap_or(0) / 1000;
        self.header = format!(
            "up {}h{:02}m{:02}s   {memory}   {reload}",
            uptime / 3600,
            uptime / 60 % 60,
            uptime % 60
        );
        self.error = None;
        self.sort_rows();
    }

    fn sort_rows(&mut self) {
        let key = self.sort;
        self.rows.sort_by(|a, b| {
            let order = match key {
                0 => a.id.cmp(&b.id),
                1 => kind_rank(&a.kind)
                    .cmp(&kind_rank(&b.kind))
                    .then(a.id.cmp(&b.id)),
                2 => a.component_type.cmp(&b.component_type),
                3 => a.events_in.total_cmp(&b.events_in),
                4 => a.events_out.total_cmp(&b.events_out),
                5 => a.bytes_in.total_cmp(&b.bytes_in),
                6 => a.bytes_out.total_cmp(&b.bytes_out),
                7 => a.errors.cmp(&b.errors),
                8 => a.dropped.cmp(&b.dropped),
                9 => a.buffer_fill.total_cmp(&b.buffer_fill),
                _ => a.connections.cmp(&b.connections),
            };
            if self.descending {
                order.reverse()
            } else {
                order
            }
        });
    }
}

fn kind_rank(kind: &str) -> u8 {
    match kind {
        "source" => 0,
        "transform" => 1,
        _ => 2,
    }
}

/// `1234567` as `1.2M`.
fn count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn bytes(v: f64) -> String {
    if v >= (1u64 << 30) as f64 {
        format!("{:.1}GiB", v / (1u64 << 30) as f64)
    } else if v >= (1u64 << 20) as f64 {
        format!("{:.1}MiB", v / (1u64 << 20) as f64)
    } else if v >= 1024.0 {
        format!("{:.1}KiB", v / 1024.0)
    } else {
        format!("{v:.0}B")
    }
}

/// `GET path` on the API: the body of a 200 answer.
///
/// # Errors
///
/// The API cannot be reached, or answers another status (the message has its body).
pub fn get(authority: &str, token: Option<&str>, path: &str) -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut s = crate::tap_client::send_get(authority, token, path)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("no HTTP answer from {authority}"))?;
    let status = head.split_whitespace().nth(1).unwrap_or("?");
    if status != "200" {
        anyhow::bail!("the API answered {status}: {body}");
    }
    Ok(body.to_owned())
}

/// Runs `loghaul top` until `q`, Esc or Ctrl-C.
///
/// # Errors
///
/// The API's address cannot be worked out, or the terminal cannot be set up.
pub fn run(api: &Api) -> anyhow::Result<()> {
    let (authority, token) = api.resolve()?;
    // Fail before taking the terminal when the server cannot be reached at all.
    let first = get(&authority, token.as_deref(), "/graph")?;
    let mut view = View {
        sort: 1,
        ..View::default()
    };
    let first: Value = serde_json::from_str(&first).context("the API's /graph is not JSON")?;
    view.update(&first, Instant::now());
    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        let mut next = Instant::now() + REFRESH;
        loop {
            terminal.draw(|frame| draw(frame, &view, &authority))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(key) = event::read()?
                    && key.kind == KeyEventKind::Press
                {
                    match key.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                            return Ok(());
                        }
                        KeyCode::Char('s') | KeyCode::Right => {
                            view.sort = (view.sort + 1) % COLUMNS.len();
                            view.sort_rows();
                        }
                        KeyCode::Left => {
                            view.sort = (view.sort + COLUMNS.len() - 1) % COLUMNS.len();
                            view.sort_rows();
                        }
                        KeyCode::Char('r') => {
                            view.descending = !view.descending;
                            view.sort_rows();
                        }
                        _ => {}
                    }
                }
                continue;
            }
            next = Instant::now() + REFRESH;
            match get(&authority, token.as_deref(), "/graph")
                .and_then(|b| serde_json::from_str::<Value>(&b).map_err(Into::into))
            {
                Ok(graph) => view.update(&graph, Instant::now()),
                // Shown, and tried again next second: the server may be restarting.
                Err(e) => view.error = Some(format!("{e:#}")),
            }
        }
    })();
    ratatui::restore();
    result
}

fn draw(frame: &mut ratatui::Frame<'_>, view: &View, authority: &str) {
    let [title, table, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let status = match &view.error {
        Some(e) => Line::from(Span::styled(
            format!("cannot read the server: {e}"),
            Style::default().fg(Color::Red),
        )),
        None => Line::from(view.header.clone()),
    };
    frame.render_widget(
        Paragraph::new(vec![
            Line::from(Span::styled(
                format!("loghaul top  http://{authority}"),
                Style::default().add_modifier(Modifier::BOLD),
            )),
            status,
        ]),
        title,
    );
    let header = Row::new(COLUMNS.iter().enumerate().map(|(i, name)| {
        let mark = if i == view.sort {
            if view.descending { " ▼" } else { " ▲" }
        } else {
            ""
        };
        Cell::from(format!("{name}{mark}"))
    }))
    .style(Style::default().add_modifier(Modifier::REVERSED));
    let rows = view.rows.iter().map(|r| {
        let style = match r.health.as_str() {
            "running" => Style::default(),
            "stopped" => Style::default().fg(Color::DarkGray),
            _ => Style::default().fg(Color::Red),
        };
        let id = match &r.reason {
            Some(reason) => format!("{} ({reason})", r.id),
            None => r.id.clone(),
        };
        Row::new(vec![
            Cell::from(id),
            Cell::from(r.kind.clone()),
            Cell::from(r.component_type.clone()),
            Cell::from(count(r.events_in)),
            Cell::from(count(r.events_out)),
            Cell::from(bytes(r.bytes_in)),
            Cell::from(bytes(r.bytes_out)),
            Cell::from(count(r.errors as f64)),
            Cell::from(count(r.dropped as f64)),
            Cell::from(r.buffer.clone()),
            Cell::from(r.connections.map_or("-".to_owned(), |c| c.to_string())),
        ])
        .style(style)
    });
    let widths = [
        Constraint::Min(16),
        Constraint::Length(9),
        Constraint::Length(11),
        Constraint::Length(13),
        Constraint::Length(14),
        Constraint::Length(12),
        Constraint::Length(13),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(14),
        Constraint::Length(6),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::default()),
        table,
    );
    frame.render_widget(
        Paragraph::new("q quit   s/→ next sort column   ← previous   r reverse order"),
        footer,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_two_polls() {
        let mut view = View::default();
        let t0 = Instant::now();
        let graph = |received: u64| {
            serde_json::json!({
                "uptime_ms": 61_000,
                "components": [{
                    "id": "in", "kind": "source", "type": "syslog", "health": "running",
                    "received_events": received, "sent_events": received,
                    "received_bytes": received * 100, "sent_bytes": 0,
                    "errors": 2, "discarded": 0, "open_connections": 4
                }],
                "memory": {"used": 1024, "limit": 1 << 30},
                "last_reload": null
            })
        };
        view.update(&graph(1000), t0);
        assert_eq!(view.rows[0].events_in, 0.0, "no rate before a second poll");
        view.update(&graph(3000), t0 + Duration::from_secs(2));
        assert_eq!(view.rows[0].events_in, 1000.0);
        assert_eq!(view.rows[0].bytes_in, 100_000.0);
        assert_eq!(view.rows[0].connections, Some(4));
        assert!(view.header.starts_with("up 0h01m01s"), "{}", view.header);
        assert_eq!(count(1_234_567.0), "1.2M");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0), "3.0MiB");
    }
}
