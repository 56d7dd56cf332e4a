//! The `nlg-judge` command: parse arguments, run, print the error chain, exit (2 for
//! usage and input errors, 1 for failures).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    nlg_judge::allocations::keep_freed_memory();
    let cli = nlg_judge::cli::Cli::parse();
    nlg_judge::cli::init_logging(cli.verbose);
    match nlg_judge::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            for cause in error.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(nlg_judge::cli::exit_code(&error))
        }
    }
}
