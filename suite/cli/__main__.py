from suite.cli import main

main()
