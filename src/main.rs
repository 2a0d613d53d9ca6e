fn main() {
    std::process::exit(xsent::cli::main());
}
