"""What the documentation site generates from the code at build time (``mkdocs.yml``'s hook).

Tables a person retypes drift from the code they describe; these are rendered from the
code's own definitions instead: the command-line options from the parsers, the PopTorch
option methods from the emulator's tables, and the benchmarks' figures from their results
files. Nothing here runs a program: it imports the parser builders and reads files.
"""
