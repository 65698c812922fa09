from kvstack.cli.app import main

main()
