#include "cli.h"

int main(int argc, char** argv) { return dc::cli::run(argc, argv); }
