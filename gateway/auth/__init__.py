"""The operator key on instance-wide routes (operator.py). Who is calling — bearer credential
-> Principal, and what a Principal may do — is the domain's: services/auth.py and
services/principal.py."""
