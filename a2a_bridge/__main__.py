from a2a_bridge.cli import main

main()
