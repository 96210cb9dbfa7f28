//! Prints the README's catalog tables, rendered from `contract/catalog/bots.json`, each between
//! its marker lines; with `--write <README.md>` replaces the blocks in that file instead.
//!
//! ```sh
//! cargo run -q -p crawlguard-contract --example catalog_tables
//! cargo run -q -p crawlguard-contract --example catalog_tables -- --write README.md
//! ```

use crawlguard_contract::catalog::{begin_marker, end_marker, Catalog};
use std::process::ExitCode;

fn main() -> ExitCode {
    let catalog = match Catalog::builtin() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("catalog_tables: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {
            for (_, block) in catalog.readme_blocks() {
                println!("{block}\n");
            }
            ExitCode::SUCCESS
        }
        [flag, path] if flag == "--write" => match write(&catalog, path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("catalog_tables: {path}: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: catalog_tables [--write README.md]");
            ExitCode::FAILURE
        }
    }
}

/// Replaces every generated block of the file at `path` (markers included) with the current one.
fn write(catalog: &Catalog, path: &str) -> Result<(), String> {
    let mut text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    for (name, block) in catalog.readme_blocks() {
        let (begin, end) = (begin_marker(name), end_marker(name));
        let start = text
            .find(&begin)
            .ok_or_else(|| format!("no line {begin:?}"))?;
        let stop = text[start..]
            .find(&end)
            .map(|i| start + i + end.len())
            .ok_or_else(|| format!("no line {end:?} after {begin:?}"))?;
        text.replace_range(start..stop, &block);
    }
    std::fs::write(path, text).map_err(|e| e.to_string())
}
