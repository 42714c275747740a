"""The secure modes of the exactly-once checks: a TLS and/or SASL listener,
Kafka's StandardAuthorizer, a user for the client under test and exactly the
ACLs it needs. Used by conformance/clients/eos/runner.py (--secure, --auth)
and the Streams, Spring and Flink checks (--secure), against doze or Kafka
alike (brokers.py).

    from secure import Security
    sec = Security(directory)               # SASL_SSL with SCRAM-SHA-512 (the default mode)
    sec = Security(directory, "plain")      # or one of MODES
    broker = Doze(directory, sec.settings)  # or Kafka(...): the same settings
    broker.start()
    sec.add_user(broker.bootstrap)          # a SCRAM user, made by the super user
    sec.grant(broker.bootstrap, [("TOPIC", "in", "LITERAL", "READ"), ...])
    env.update(sec.env)                     # how the client under test connects
    client_bootstrap = broker.bootstraps[sec.listener]

The runner's own clients (setup, progress, verification) stay on PLAINTEXT,
whose User:ANONYMOUS is the only super user. The client under test reads
EOS_SECURITY: {"protocol", "mechanism" (SASL), "username", "password" (SASL),
"cafile", "certfile" and "keyfile" (SSL: its client certificate)}; the Java
ones read the same as client properties from the file EOS_CLIENT_PROPERTIES
names. The throwaway CA and certificates come from the openssl command
(certs.py). Needs confluent-kafka (conformance/needs.py).
"""
import json
import os

from certs import make_certs, make_client_cert

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USER, PASSWORD = "eos-client", "eos-client-secret"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
MODES = {                         # name -> (listener protocol, SASL mechanism)
    "scram-ssl": ("SASL_SSL", "SCRAM-SHA-512"),
    "scram": ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    "plain-ssl": ("SASL_SSL", "PLAIN"),
    "plain": ("SASL_PLAINTEXT", "PLAIN"),
    "cert": ("SSL", None),        # TLS with a client certificate: the principal is its subject
}


class Security:
    def __init__(self, directory, mode="scram-ssl", user=USER, password=PASSWORD):
        self.mode = mode
        self.listener, self.mechanism = MODES[mode]
        certs = os.path.join(directory, "certs")
        os.makedirs(certs, exist_ok=True)
        self.keystore, self.cafile = make_certs(certs)
        self.user, self.password = user, password
        self.principal = f"User:CN={user}" if self.listener == "SSL" else f"User:{user}"
        name = self.listener.lower()
        self.settings = {
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{self.listener}:{self.listener}",
            "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}
        client = {"protocol": self.listener}
        props = [f"security.protocol={self.listener}"]
        if self.mechanism:
            module = SCRAM_MODULE if self.mechanism.startswith("SCRAM") else PLAIN_MODULE
            self.settings["sasl.enabled.mechanisms"] = self.mechanism
            self.settings[f"listener.name.{name}.{self.mechanism.lower()}.sasl.jaas.config"] = (
                f'{module} required user_{user}="{password}";' if module == PLAIN_MODULE else f"{module} required;")
            client.update(mechanism=self.mechanism, username=user, password=password)
            props += [f"sasl.mechanism={self.mechanism}",
                      f'sasl.jaas.config={module} required username="{user}" password="{password}";']
        if self.listener.endswith("SSL"):
            self.settings.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": self.keystore})
            client["cafile"] = self.cafile
            props += ["ssl.truststore.type=PEM", f"ssl.truststore.location={self.cafile}"]
        if self.listener == "SSL":
            self.settings.update({"ssl.client.auth": "required", "ssl.truststore.type": "PEM",
                                  "ssl.truststore.location": self.cafile})
            cert, key = make_client_cert(certs, user)
            client.update(certfile=cert, keyfile=key)
            props += ["ssl.keystore.type=PEM", f"ssl.keystore.location={certs}/{user}-keystore.pem"]
        self.client_json = json.dumps(client)
        self.client_properties = os.path.join(certs, "client.properties")
        with open(self.client_properties, "w") as f:
            f.write("".join(p + "\n" for p in props))

    @property
    def env(self):
        """What the client under test is started with: EOS_SECURITY (JSON) and
        EOS_CLIENT_PROPERTIES (a Kafka client properties file, read by the Java ones)."""
        return {"EOS_SECURITY": self.client_json, "EOS_CLIENT_PROPERTIES": self.client_properties}

    def add_user(self, bootstrap):
        """The client's SCRAM credential (AlterUserScramCredentials); PLAIN users are in
        the listener's JAAS config, a certificate needs none."""
        if not (self.mechanism or "").startswith("SCRAM"):
            return
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, \
            UserScramCredentialUpsertion
        admin = AdminClient({"bootstrap.servers": bootstrap})
        mechanism = ScramMechanism[self.mechanism.replace("-", "_")]
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                self.user, ScramCredentialInfo(mechanism, 4096), self.password.encode())]).values():
            f.result(30)

    def grant(self, bootstrap, grants):
        """ALLOW ACLs for the client: grants are (resource type, name, pattern type,
        operation), in the names of confluent_kafka.admin's enums ("TOPIC", "LITERAL", "READ")."""
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, \
            ResourcePatternType, ResourceType
        admin = AdminClient({"bootstrap.servers": bootstrap})
        bindings = [AclBinding(ResourceType[rt], name, ResourcePatternType[pt], self.principal, "*",
                               AclOperation[op], AclPermissionType.ALLOW) for rt, name, pt, op in grants]
        for f in admin.create_acls(bindings).values():
            f.result(30)
