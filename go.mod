module github.com/oomguard/oomguard

go 1.26

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/opencontainers/runtime-spec v1.3.0
)
