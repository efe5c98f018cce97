import sys
sys.path.insert(0, "bench")
import cpu_breakdown as B
B.WRAPPED += [("orchestrator.cuda.sanitizer_cache", "overwrite_entry"), ("orchestrator.files", "_open_or_create"), ("orchestrator.files", "_write_all"), ("orchestrator.cuda.sanitizer_cache", "sha256_bytes"),
              ("orchestrator.cuda.sanitizer_cache", "_canonical"), ("orchestrator.cuda.sanitizer_cache", "entry_path"),
              ("orchestrator.cuda.sanitizer_cache", "Footprint.of"), ("orchestrator.cuda.sanitizer_cache", "PassKey.model_dump"),
              ("orchestrator.cli.commands", "_discover"), ("orchestrator.cli.report", "make_report"),
              ("orchestrator.cli.report", "report_json"), ("orchestrator.cli.annotations", "publish"),
              ("orchestrator.cli.display", "print_tally"), ("orchestrator.cuda.sanitizer_output", "build_report"),
              ("orchestrator.judge.passes", "build_report"), ("orchestrator.workflows.scheduler", "Scheduler.__init__"),
              ("orchestrator.workflows.turn", "Turn.__init__"), ("orchestrator.workflows.turn", "load_pass"),
              ("orchestrator.workflows.turn", "watching"), ("orchestrator.workflows.sharing", "GpuShare._dispatch"),
              ("orchestrator.workflows.turn", "sanitizer_command"), ("orchestrator.files", "atomic_write"),
              ("orchestrator.workflows.scheduler", "Scheduler._ask_for_a_gpu"), ("orchestrator.workflows.turn", "Turn.start_sanitizing"),
              ("orchestrator.workflows.turn", "Turn.take_the_passes")]
sys.argv = ["cpu_breakdown.py"] + sys.argv[1:]
B.main()
