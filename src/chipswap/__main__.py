from chipswap.cli import main

main()
