//! `crawlguard`: report on access logs, replay a configuration offline, check
//! configurations, classify User-Agents. See `crawlguard --help`.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(crawlguard_cli::cli::main());
}
