//! `crawlguard`: report on access logs, replay a configuration offline, check
//! configurations, classify User-Agents. See `crawlguard --help`.

fn main() {
    std::process::exit(crawlguard_cli::cli::main());
}
