from eos.cli import main

main()
