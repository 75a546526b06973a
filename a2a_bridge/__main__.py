from a2a_bridge.cli.main import main

main()
