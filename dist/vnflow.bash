# bash completion for vnflow(1): commands, subcommands, options, and files where a
# command takes a package, a request or a database.
_vnflow() {
  local cur prev words cword
  if declare -F _init_completion >/dev/null; then
    _init_completion || return
  else
    cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD - 1]}
    words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
  fi

  local cmd=${words[1]:-} sub=${words[2]:-}
  case $prev in
    --request | --password-file | --token-file | --clouds-file | --heat-env | --cacert | \
      --ca-file | --db | --trust | --signing-cert)
      COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null; return ;;
    --work-dir)
      COMPREPLY=($(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null; return ;;
    --format)
      COMPREPLY=($(compgen -W "text dot mermaid seqdiag plantuml json" -- "$cur")); return ;;
    --op)
      COMPREPLY=($(compgen -W "instantiate terminate heal scale change_ext_conn modify_info" \
        -- "$cur")); return ;;
    --state)
      COMPREPLY=($(compgen -W "STARTING PROCESSING COMPLETED FAILED_TEMP FAILED ROLLING_BACK
        ROLLED_BACK" -- "$cur")); return ;;
    --type)
      COMPREPLY=($(compgen -W "openstack kubernetes" -- "$cur")); return ;;
    --hook-user)
      COMPREPLY=($(compgen -u -- "$cur")); return ;;
    --package | --name | --description | --workers | --timeout | --from | --instance | \
      --limit | --poll-ms | --flavour | --flavor | --repeat | --cloud | --auth-url | \
      --username | --project | --user-domain | --project-domain | --region | --interface | \
      --server | --id | --orchestration-endpoint | --heat-stall-secs | --max-redispatch)
      return ;;
  esac

  if ((cword == 1)); then
    COMPREPLY=($(compgen -W "csar workflow action package instance op vim subscription key daemon version help" \
      -- "$cur"))
    return
  fi

  local subs="" opts=""
  case $cmd in
    csar)
      subs="validate inspect"
      opts="--help --json --no-digests --strict --flavour --repeat --trust --require-signature
        --signing-cert" ;;
    workflow) subs="show check"; opts="--help --flavour --op --format" ;;
    action) subs="list show"; opts="--help --json --markdown" ;;
    package)
      subs="onboard list"
      opts="--help --db --json --trust --require-signature --signing-cert" ;;
    instance)
      subs="create list show delete instantiate heal scale terminate change-ext-conn modify"
      opts="--help --db --json --package --name --description --request --wait --timeout" ;;
    op)
      subs="list show history wait watch retry rollback fail cancel replay"
      opts="--help --db --json --instance --state --limit --timeout --dry-run --force --package
        --from --timing" ;;
    vim)
      subs="register list show delete"
      opts="--help --db --json --name --type --from-env --cloud --clouds-file --auth-url --username
        --password-file --project --user-domain --project-domain --region --interface
        --cacert --heat-env --default --server --token-file --ca-file --id
        --orchestration-endpoint --heat-stall-secs" ;;
    subscription) subs="list show delete"; opts="--help --db --json" ;;
    key) subs="rotate"; opts="--help --db" ;;
    daemon) opts="--help --db --workers --work-dir --poll-ms --hook-user --max-redispatch --name
      --lease-ms --metrics-listen --log-format --listen --api --auth --auth-file --api-page-size --api-threads
      --keystone-url --keystone-role --keystone-project --keystone-cacert --tls-cert --tls-key
      --trust --signing-cert --require-signature --notify-retry-s --notify-backoff-max-ms
      --notify-cacert --notify-allow --public-url --http-allow" ;;
    *) return ;;
  esac

  if ((cword == 2)) && [[ -n $subs ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    return
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    return
  fi
  # Packages: .csar/.zip archives or unpacked folders.
  case $cmd/$sub in
    csar/* | workflow/* | package/onboard)
      COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null ;;
  esac
}
complete -F _vnflow vnflow
